"""The Kubernetes API server (kube-apiserver) and its etcd, imitated: the in-memory store with
resourceVersions and watch history, discovery and OpenAPI, CRUD with optimistic concurrency, the
three patch types, label and field selectors, chunked lists, watches, server-side Tables, pod
admission and defaulting, and the pure rules of graceful deletion and PodDisruptionBudget-guarded
eviction that the API server enforces.

Left out: protobuf request bodies are answered 415 (JSON and YAML only); no deletecollection and
no exec, attach or `kubectl logs` subresources; no StatefulSets; deleting a namespace does not
cascade to what is in it. Authentication (tokens) and RBAC only with `sim serve --rbac`, which
also serves TLS (rbac.py, rbac_http.py, tls.py); without it every request is the admin's."""
