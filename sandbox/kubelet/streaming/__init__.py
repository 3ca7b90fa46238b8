"""The kubelet's streaming endpoints as the apiserver dials them: container logs and
port-forward (WebSocket channel framing and SPDY/3.1), over a minimal HTTP/1.1 layer."""
