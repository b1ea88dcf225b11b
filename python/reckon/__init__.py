"""reckon: one network trained on many machines by Strom's threshold gossip.

`reckon.torch.Peer` joins a PyTorch training loop to a reckon cluster (of
other Python peers or of `reckon-worker` processes): after each optimizer
step it publishes what the step changed as +-tau updates, applies the
peers', and sets the parameters to the cluster's fixed-point replica.
`reckon._reckon.FlatPeer` is the same over any float32 buffer. `built_with_cuda`:
whether parameters on a GPU are taken (this build had nvcc).
"""
from reckon._reckon import FlatPeer, Stopped, built_with_cuda, data_identity  # noqa: F401
