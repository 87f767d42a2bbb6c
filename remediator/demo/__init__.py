"""`remediator demo`: a simulated cluster, the controller, its console and a stream of faults."""
