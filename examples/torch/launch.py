"""What the torch comparisons share: ports, loopback's byte counter, the
interface that holds an address, and the network lab (`reckonctl lab`,
ctl/lab_command.cc), which puts each process in a network namespace of its
own behind a shaped link. Used by compare_ddp.py and lm.py."""
import json
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lo_bytes():
    """Bytes loopback has carried (every process on this machine's)."""
    with open("/sys/class/net/lo/statistics/tx_bytes") as f:
        return int(f.read())


def interface_of(ip):
    """The network interface holding `ip` (ip -o -4 addr show)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == ip:
            return fields[1]
    raise RuntimeError(f"no interface holds {ip}")


def sent_bytes_of(ip):
    """Bytes sent so far by the interface holding `ip` (in the lab: this
    namespace's one link, so what this process sent, framing included)."""
    with open(f"/sys/class/net/{interface_of(ip)}/statistics/tx_bytes") as f:
        return int(f.read())


class Lab:
    """`reckonctl lab`: a network namespace per process behind a shaped
    switch, torn down when its stdin closes."""

    def __init__(self, reckonctl, workers, link):
        self.process = subprocess.Popen([reckonctl, "lab", "--workers", str(workers), "--link",
                                         link], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"reckonctl lab exited {self.process.wait()} (root is needed)")
        self.description = json.loads(line)

    def forwarded_bytes(self):
        """Bytes the switch forwarded between the processes."""
        self.process.stdin.write("counters\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"reckonctl lab: counters: {answer['error']}")
        return answer["bytes"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)
