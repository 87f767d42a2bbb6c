"""The node agent: follows the kernel log and the driver's GPU list on one GPU node and pushes
what it sees (XIDs, GPUs fallen off the bus or gone) to the controller within a second.

Kept small on purpose (the standard library only): it runs on every GPU node, beside the
training job.
"""
