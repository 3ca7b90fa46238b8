"""The sandbox's simulated kubelet: nodes, their heartbeats, and the pods bound to them."""
