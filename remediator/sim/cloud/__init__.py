"""The cloud provider, imitated: the node-pool API that replaces an unhealthy node from spare
capacity as an asynchronous operation (`nodepool`, the contract in docs/nodepool-api.yaml).

Left out: any real cloud's own API (instance groups, Cluster API, AWS, GCE) — the node-pool
contract is the generic one remediator's HTTP provider speaks; no quotas, regions or billing."""
