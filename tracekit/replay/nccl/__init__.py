"""The NCCL model: what NCCL builds for a communicator and how it runs each collective.

Read from NVIDIA/nccl 2.30.7 (src/graph/search.cc, connect.cc, trees.cc, paths.cc, tuning.cc,
src/enqueue.cc, src/init.cc, src/transport/net.cc and net_ib/), written in our own words:

* `topology`: the channels, the ring and the tree of every channel, and the NIC each uses on each
  host (`comm.CommTopology`); or, with `--nccl-log`, those NCCL printed (`log`, `from_log`);
* `trees`: NCCL's binary and double binary trees over a communicator's nodes;
* `tuning`: NCCL's cost model, which picks the algorithm, protocol and channels of a collective;
* `options`: the NCCL settings modelled (NCCL_CROSS_NIC lives in the placement, with the NICs).
"""
