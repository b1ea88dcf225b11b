"""reckon for PyTorch: a training loop's parameters on a reckon cluster.

    import torch, reckon.torch
    model = Net()
    peer = reckon.torch.Peer(model, node_id="w0", listen="0.0.0.0:7070",
                             peers=["w1:7070", "w2:7070"], threshold=0.005)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        peer.step()          # publish this step, apply the peers', sync
    peer.finish()            # the cluster's final agreement

The parameters become views into one flat float32 buffer (their order and
shapes are the cluster's layout and go into its fingerprint), which the
peer reads and writes in place: through the buffer protocol on the CPU,
by its device address on a GPU (reckon built with CUDA): no dependency on
torch's C++ ABI. On a GPU the replica, the residual and Strom's threshold
pass stay on that GPU (cuda/cuda_flat_replica.h): a step moves only the words
it emits and the peers' messages across PCIe, ordered after the work on
torch's current stream (the optimizer's step).
"""
import datetime
import os
import socket

import torch

from reckon._reckon import FlatPeer, built_with_cuda


def describe(named_tensors, aliases=()):
    """The layout as the fingerprint names it: `name:shape` in order, then
    each alias as `name=the tensor it shares storage with`."""
    return ";".join([f"{name}:{'x'.join(str(d) for d in t.shape)}" for name, t in named_tensors]
                    + [f"{name}={target}" for name, target in aliases])


def _extent(t):
    """[first byte, past the last byte) of `t`'s elements in memory."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _tensors_of(module, buffers):
    """The (name, tensor) pairs the replica holds: the parameters, each
    once (a Parameter listed twice counts once), then, when `buffers`, a
    module's persistent floating-point buffers (BatchNorm's running
    statistics: they change the output; a non-persistent buffer is derived
    by the model, such as a causal mask, and stays out). Integer buffers
    (num_batches_tracked) stay each process's own: they change nothing
    unless a BatchNorm averages cumulatively (momentum=None), which is
    refused."""
    if isinstance(module, torch.nn.Module):
        named = list(module.named_parameters())
        if buffers:
            for name, sub in module.named_modules():
                if (isinstance(sub, torch.nn.modules.batchnorm._BatchNorm)
                        and sub.track_running_stats and sub.momentum is None):
                    raise ValueError(
                        f"reckon.torch.Peer: {name} ({type(sub).__name__}) has momentum=None: "
                        "its running statistics are a cumulative average over its "
                        "num_batches_tracked, which each process counts alone; give it a "
                        "momentum (the default 0.1)")
            # Persistent ones (in the state_dict): a non-persistent buffer
            # is one the model derives and rebuilds (a causal mask, a
            # rotary cache), not state.
            for prefix, sub in module.named_modules():
                for n, b in sub._buffers.items():
                    if (b is not None and b.is_floating_point()
                            and n not in sub._non_persistent_buffers_set):
                        named.append((f"{prefix}.{n}" if prefix else n, b))
    else:
        named = list(module)
    seen, unique = set(), []
    for name, t in named:
        if id(t) not in seen:
            seen.add(id(t))
            unique.append((name, t))
    return unique


def _untie(named):
    """(tensors the replica holds, aliases as (name, tensor, the name of
    the held tensor it shares)): a tensor over exactly the
    memory of an earlier one (two Parameters sharing storage, as tied
    weights) becomes an alias of it and stays tied; one that overlaps
    another's memory otherwise is refused, naming both."""
    held, aliases, by_place = [], [], {}
    for name, t in named:
        place = (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)
        if t.numel() and place in by_place:
            aliases.append((name, t, by_place[place]))
            continue
        by_place[place] = name
        held.append((name, t))
    spans = sorted((_extent(t), name) for name, t in held if t.numel())
    for ((_, end), first), ((start, _), second) in zip(spans, spans[1:]):
        if start < end:
            raise ValueError(f"reckon.torch.Peer: tensors '{second}' and '{first}' overlap in "
                             "memory without being the same tensor: the replica would untie "
                             "them; share the whole tensor, or copy it")
    return held, aliases


def _element(name, t, flat_index):
    """`name[i, j]` for element `flat_index` of `t`."""
    index = []
    for size in reversed(t.shape):
        index.append(flat_index % size)
        flat_index //= size
    return f"{name}[{', '.join(str(i) for i in reversed(index))}]" if index else name


def _address_towards(host):
    """This machine's address on the route to `host` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


def from_torchrun(environ=os.environ):
    """node_id, listen, peers and bootstrap for a process torchrun started
    (docs/pytorch.md "Started by torchrun"), from its environment:

    - RECKON_SEEDS unset (one torchrun over every host, as DDP is run): each
      process listens on RECKON_PORT + LOCAL_RANK (RECKON_PORT default
      7070) and publishes its address in torchrun's TCPStore (MASTER_ADDR,
      MASTER_PORT; the agent's store where torchrun hosts it); its peers are
      every rank's address; rank 0 bootstraps.
    - RECKON_SEEDS=host:port,... (one torchrun a host, each its own
      rendezvous, so that a death restarts that host's processes only): the
      seeds and this host's other local ranks are its peers; the process
      whose address is the first seed bootstraps, unless torchrun restarted
      it (a restarted process joins the cluster it left).

    The address is RECKON_ADVERTISE (a host name or IP) or this machine's
    address towards MASTER_ADDR (the first seed with RECKON_SEEDS), with
    the port; the node's id is that address with a dash for the colon (one
    process an address)."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
               if k not in environ]
    if missing:
        raise ValueError("reckon.torch.Peer: no node_id given and not started by torchrun ("
                         f"{', '.join(missing)} unset): give node_id, listen and peers, or "
                         "start the script with torchrun")
    def number(key, default=None):
        value = environ.get(key, default)
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"reckon.torch.Peer: {key}={value!r} is not a number") from None

    rank, world = number("RANK"), number("WORLD_SIZE")
    local_rank = number("LOCAL_RANK")
    local_world = number("LOCAL_WORLD_SIZE", "1")
    restarted = number("TORCHELASTIC_RESTART_COUNT", "0") > 0
    base = number("RECKON_PORT", "7070")
    if not 0 < base + local_rank < 65536:
        raise ValueError(f"reckon.torch.Peer: RECKON_PORT {base} + LOCAL_RANK {local_rank} "
                         "is not a port")
    seeds = [a for a in environ.get("RECKON_SEEDS", "").split(",") if a]
    towards = seeds[0].rsplit(":", 1)[0] if seeds else environ["MASTER_ADDR"]
    host = environ.get("RECKON_ADVERTISE") or _address_towards(towards)
    me = f"{host}:{base + local_rank}"
    if seeds:
        peers = seeds + [f"{host}:{base + r}" for r in range(local_world)]
        bootstrap = seeds[0] == me and not restarted
    else:
        agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        store = torch.distributed.TCPStore(
            environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), world,
            is_master=rank == 0 and not agent_store, timeout=datetime.timedelta(minutes=10))
        attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = torch.distributed.PrefixStore(f"reckon/attempt_{attempt}/", store)
        store.set(f"address/{rank}", me)
        peers = [store.get(f"address/{r}").decode() for r in range(world)]
        bootstrap = rank == 0
    return {"node_id": me.replace(":", "-"), "listen": f"0.0.0.0:{base + local_rank}",
            "advertise": me,
            "peers": [p for p in dict.fromkeys(peers) if p != me], "bootstrap": bootstrap}


class Peer:
    """A reckon peer for `module`'s parameters and floating-point buffers
    (BatchNorm's running statistics; `buffers=False` leaves them out), or
    an iterable of (name, parameter) pairs: each tensor once, tied ones kept
    tied, float32 only (docs/pytorch.md "A model's tensors"). Without
    node_id, node_id, listen, advertise, peers and bootstrap come from
    torchrun's environment (from_torchrun). Keyword arguments are
    reckon-worker's: node_id, advertise (how peers reach this one),
    listen, peers (host:port list), cluster_token, threshold (tau), codec
    ("rice" or "packed32"), bootstrap, join_after_messages (join only from a
    peer that has applied that many messages: never from this process's own
    start), seed, fraction_bits, failure_timeout_s, heartbeat_ms (the
    failure detector's beat on every peer stream, default 100; what an idle
    cluster sends: fewer beats, fewer bytes, slower to notice a death),
    quiesce_timeout_s,
    http_listen (/metrics, /healthz, /readyz, /status, as reckon-worker's
    --http-listen), handle_sigterm (default True: SIGTERM ends a join or
    the final wait promptly, and finish() raises reckon.Stopped), tls_ca,
    tls_cert, tls_key (mutual TLS and signed updates, as reckon-worker's
    --tls-*: PEM files, the certificate naming node_id). To
    join a cluster of reckon-worker processes, `model` is their fingerprint's
    model string (e.g. "784,512,512,10/relu", whose layout, each layer's
    weight [out, in] then its bias, is torch.nn.Linear's) and `data`
    reckon._reckon.data_identity(their --data-dir)."""

    def __init__(self, module, *, node_id=None, model=None, buffers=True, **options):
        if node_id is None:
            # Started by torchrun: its environment says who and where.
            found = from_torchrun()
            node_id = found.pop("node_id")
            for key, value in found.items():
                options.setdefault(key, value)
        named = _tensors_of(module, buffers)
        if not named:
            raise ValueError("reckon.torch.Peer: no parameters")
        device = named[0][1].device
        for name, t in named:
            if t.device != device:
                raise ValueError(f"reckon.torch.Peer: parameter {name} is on {t.device}, "
                                 f"{named[0][0]} on {device}: one device for all")
            if t.dtype != torch.float32:
                raise ValueError(
                    f"reckon.torch.Peer: parameter {name} is {t.dtype}: float32 only (the "
                    "replica is float32 fixed point, identical everywhere); keep the "
                    "parameters float32 and compute in half precision with torch.autocast "
                    "(bf16 on a CPU, bf16 or fp16 on a GPU)")
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"reckon.torch.Peer: parameters on {device}: cpu or cuda")
        held, aliases = _untie(named)
        for name, t in held:
            with torch.no_grad():
                bad = (~torch.isfinite(t)).nonzero()
            if len(bad):
                where = bad[0].tolist()
                element = f"{name}[{', '.join(str(i) for i in where)}]" if where else name
                raise ValueError(f"reckon.torch.Peer: {element} is {float(t[tuple(where)])}: "
                                 "the replica holds finite values only")
        if device.type == "cuda" and not built_with_cuda:
            raise ValueError(f"reckon.torch.Peer: parameters on {device}, but this reckon was "
                             "built without CUDA (no nvcc when it was built)")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self._device = device
        total = sum(t.numel() for _, t in held)
        self._flat = torch.empty(total, dtype=torch.float32, device=device)
        self._held = []  # (name, tensor, offset) in the flat buffer's order
        offset = 0
        with torch.no_grad():
            for name, t in held:
                n = t.numel()
                self._flat[offset:offset + n].copy_(t.reshape(-1))
                # The tensor lives in the flat buffer from now on: what the
                # optimizer (or BatchNorm) writes, the peer reads, and the
                # other way round.
                t.data = self._flat[offset:offset + n].view_as(t)
                self._held.append((name, t, offset))
                offset += n
            by_name = dict(held)
            for _, alias, target in aliases:
                alias.data = by_name[target].data  # tied, as torch had them
        self.layout = describe(held, [(name, target) for name, _, target in aliases])
        if device.type == "cuda":
            self._array = None
            initial = self._flat.cpu().numpy()  # waits for the copies above
            options["device"] = device.index
        else:
            self._array = self._flat.numpy()  # shares the memory
            initial = self._array
        self._peer = FlatPeer(node_id, model if model is not None else self.layout, initial,
                              **options)
        # Joined from a peer's snapshot: its weights, not ours.
        self._call("read_into")

    def step(self, samples=0, loss=None):
        """After the optimizer's step: publish what it changed, apply the
        peers' updates, and set the parameters to the replica. `samples` and
        the batch's mean `loss` (a float or a tensor), when given, go to
        /metrics (reckon_samples_total, reckon_train_loss)."""
        loss_sum = 0.0 if loss is None else float(loss) * samples
        try:
            self._call("step", samples, loss_sum)
        except ValueError as refused:
            bad = self._first_non_finite()
            if bad is None:
                raise
            raise ValueError(f"reckon.torch.Peer.step: {bad} after the optimizer's step: "
                             "nothing published, the tensors as the optimizer left them") \
                from refused

    def _first_non_finite(self):
        """`name[i, j] is nan` for the first element that is not finite, or
        None."""
        with torch.no_grad():
            bad = (~torch.isfinite(self._flat)).nonzero()
        if len(bad) == 0:
            return None
        index = int(bad[0])
        for name, t, offset in reversed(self._held):
            if index >= offset:
                value = float(self._flat[index])
                return f"{_element(name, t, index - offset)} is {value}"
        return None

    def finish(self):
        """Training is over: wait for the cluster's final agreement and set
        the parameters to the final replica, identical on every peer."""
        self._call("finish")

    def _call(self, method, *args):
        """The module's `method` on the flat buffer: its array on the CPU;
        on a GPU its address, after the work on torch's current stream."""
        if self._array is not None:
            return getattr(self._peer, method)(self._array, *args)
        stream = torch.cuda.current_stream(self._device).cuda_stream
        return getattr(self._peer, method + "_cuda")(self._flat.data_ptr(), self._flat.numel(),
                                                    stream, *args)

    @property
    def param_count(self):
        """The replica's values: the tensors it holds, each once."""
        return self._peer.param_count

    @property
    def threshold(self):
        """tau, in weight units, as the wire's grid holds it (the value
        given, rounded to the fixed-point step)."""
        return self._peer.threshold

    @threshold.setter
    def threshold(self, tau):
        """The next steps' tau. Every message carries its own step, so it
        may change between any two steps: with AdamW, whose steps are about
        the learning rate in size, `peer.threshold = k * lr` each step keeps
        the messages' density as the schedule moves (docs/pytorch.md
        "Transformers and AdamW"). The residual keeps what it holds."""
        self._peer.threshold = tau

    @property
    def device(self):
        """Where the parameters, the replica and the residual are."""
        return self._device

    def weight_hash(self):
        return self._peer.weight_hash()

    @property
    def address(self):
        return self._peer.address

    @property
    def http_port(self):
        """The HTTP endpoint's port (0: none)."""
        return self._peer.http_port

    @property
    def stopping(self):
        """A SIGTERM came: leave the loop and call finish(), which raises
        reckon.Stopped unless the cluster had already agreed."""
        return FlatPeer.stopping

    @property
    def steps(self):
        return self._peer.steps

    @property
    def bytes_sent(self):
        return self._peer.bytes_sent

    @property
    def updates_sent(self):
        return self._peer.updates_sent
