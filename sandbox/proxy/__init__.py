"""The sandbox's service proxy: a 127.0.0.1 listener per Service port that follows the
Service's ready EndpointSlices (`python -m sandbox.proxy`), and where to find those listeners."""

from sandbox.proxy.addresses import (
    ProxyAddress,
    ProxyAddressNotFound,
    address_of,
    read_addresses,
)

__all__ = ["ProxyAddress", "ProxyAddressNotFound", "address_of", "read_addresses"]
