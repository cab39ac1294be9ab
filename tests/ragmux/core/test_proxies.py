"""The client's address and the https flag, as the proxies in front of ragmux report them."""

import ipaddress

import pytest
from django.test import RequestFactory

from ragmux.core.proxies import client_address, proxy_headers_believed


def request(peer: str, forwarded_for: str | None = None, real_ip: str | None = None):
    headers = {}
    if forwarded_for is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded_for
    if real_ip is not None:
        headers["HTTP_X_REAL_IP"] = real_ip
    return RequestFactory().get("/", REMOTE_ADDR=peer, **headers)


@pytest.fixture
def proxies(settings):
    """Names the networks of the proxies in front, with TRUST_PROXY_HEADERS on."""

    def trust(*networks: str) -> None:
        settings.TRUST_PROXY_HEADERS = True
        settings.TRUSTED_PROXY_CIDRS = [ipaddress.ip_network(network) for network in networks]

    return trust


def test_without_trusted_proxies_the_peer_is_the_client(settings):
    settings.TRUST_PROXY_HEADERS = False
    settings.TRUSTED_PROXY_CIDRS = []
    assert client_address(request("198.51.100.7", "203.0.113.1", "203.0.113.2")) == "198.51.100.7"


def test_trust_proxy_headers_alone_takes_the_last_forwarded_entry_as_before(settings):
    settings.TRUST_PROXY_HEADERS = True
    settings.TRUSTED_PROXY_CIDRS = []
    assert client_address(request("10.0.0.2", "1.2.3.4, 203.0.113.9")) == "203.0.113.9"
    assert client_address(request("10.0.0.2", real_ip="203.0.113.8")) == "203.0.113.8"
    assert client_address(request("10.0.0.2")) == "10.0.0.2"


def test_forwarded_for_is_walked_from_the_right_past_the_trusted_proxies(proxies):
    proxies("10.0.0.0/8", "192.168.1.0/24")
    # client -> CDN edge (spoofed entry before it) -> load balancer 10.1.1.1 -> proxy 192.168.1.5 -> us
    chain = "6.6.6.6, 203.0.113.50, 10.1.1.1"
    assert client_address(request("192.168.1.5", chain)) == "203.0.113.50"
    # An entry the client wrote to the left of its own address changes nothing.
    assert client_address(request("192.168.1.5", "1.1.1.1, " + chain)) == "203.0.113.50"


def test_headers_from_a_peer_outside_the_trusted_networks_are_ignored(proxies):
    proxies("10.0.0.0/8")
    forged = request("203.0.113.66", "198.51.100.1", "198.51.100.2")
    assert client_address(forged) == "203.0.113.66"
    assert not proxy_headers_believed(forged)


def test_a_request_from_inside_is_attributed_to_the_furthest_proxy(proxies):
    proxies("10.0.0.0/8")
    assert client_address(request("10.0.0.1", "10.0.0.9, 10.0.0.5")) == "10.0.0.9"
    assert client_address(request("10.0.0.1", real_ip="198.51.100.4")) == "198.51.100.4"
    assert client_address(request("10.0.0.1", real_ip="not-an-address")) == "10.0.0.1"


def test_an_entry_that_is_not_an_address_stops_the_walk_at_the_nearest_proxy(proxies):
    proxies("10.0.0.0/8")
    assert client_address(request("10.0.0.1", "203.0.113.5, unknown, 10.0.0.7")) == "10.0.0.7"


def test_ipv6_proxies_and_ipv4_mapped_peers_are_recognised(proxies):
    proxies("fd00::/8", "10.0.0.0/8")
    assert client_address(request("fd00::1", "2001:db8::42, fd00::2")) == "2001:db8::42"
    assert client_address(request("::ffff:10.0.0.3", "203.0.113.77")) == "203.0.113.77"
