"""The one owner of fences (cordon, our taint, our marks, the Slurm drain): `derive` says which
nodes the store requires fenced, `plan` compares that with the cluster, `owner` carries it out
both ways every poll. See docs/safety.md for the invariants it keeps."""
