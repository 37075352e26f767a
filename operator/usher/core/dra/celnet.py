"""Go's URL, IP address and CIDR parsing, as the Kubernetes CEL ``url``, ``ip`` and ``cidr`` functions use it. Pure.

kube-scheduler parses these with Go's ``net/url`` and ``net/netip``; this
module ports the parts those functions rely on, so a selector accepts, refuses
and reads the same strings: ``url`` checks with ``ParseRequestURI`` and reads
with ``Parse`` (Go 1.26 rules: a host with a second colon is refused for http
and https), its accessors are ``Scheme``, ``Host``, ``Hostname()``, ``Port()``,
``EscapedPath()`` and ``Query()``; ``ip`` and ``cidr`` follow ``ParseAddr`` and
``ParsePrefix`` plus Kubernetes' refusal of zones and IPv4-mapped IPv6
addresses. Error texts keep Go's shape (``parse "x": invalid URI for
request``); the reason inside an IP parse error is Python's wording.
"""

from __future__ import annotations

import ipaddress
import json
import string
from dataclasses import dataclass
from typing import TypeAlias

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

_ALNUM = frozenset(string.ascii_letters + string.digits)
_HOST_EXTRA = frozenset("!$&'()*+,;=:[]<>\"")
_RESERVED_ALLOWED = {"path": "$&+,/:;=@", "segment": "$&+:=@", "userinfo": "$&+,;=", "fragment": "$&+,/:;=?@"}
_USERINFO = frozenset(string.ascii_letters + string.digits + "-._:~!$&'()*+,;=%@")
_MAX_QUERY_PARAMETERS = 10_000


def go_quote(text: str) -> str:
    """Go's ``%q`` of ``text``, near enough: a double-quoted, escaped string."""
    return json.dumps(text, ensure_ascii=False)


# ------------------------------------------------------------------ net/url


def _should_escape(byte: int, mode: str) -> bool:
    char = chr(byte)
    if char in _ALNUM or char in "-_.~":
        return False
    if mode in ("host", "zone") and char in _HOST_EXTRA:
        return False
    if char in "$&+,/:;=?@":  # reserved: allowed unescaped in some parts only
        return char not in _RESERVED_ALLOWED.get(mode, "")
    return not (mode == "fragment" and char in "!()*")


def _unescape(text: str, mode: str) -> str:
    data = text.encode()
    out = bytearray()
    i = 0
    while i < len(data):
        byte = data[i]
        if byte == ord("%"):
            escape = data[i : i + 3]
            if len(escape) < 3 or not all(chr(b) in string.hexdigits for b in escape[1:]):
                raise ValueError(f"invalid URL escape {go_quote(escape.decode(errors='replace'))}")
            value = int(escape[1:], 16)
            if mode == "host" and value < 0x80 and escape != b"%25":
                raise ValueError(f"invalid URL escape {go_quote(escape.decode())}")
            if mode == "zone" and escape != b"%25" and value != ord(" ") and _should_escape(value, "host"):
                raise ValueError(f"invalid URL escape {go_quote(escape.decode())}")
            out.append(value)
            i += 3
            continue
        if byte == ord("+"):
            out.append(ord(" ") if mode == "query" else byte)
        elif mode in ("host", "zone") and byte < 0x80 and _should_escape(byte, mode):
            raise ValueError(f"invalid character {go_quote(chr(byte))} in host name")
        else:
            out.append(byte)
        i += 1
    return out.decode(errors="replace")


def _escape(text: str, mode: str) -> str:
    return "".join(
        ("+" if byte == ord(" ") and mode == "query" else f"%{byte:02X}") if _should_escape(byte, mode) else chr(byte)
        for byte in text.encode()
    )


@dataclass(frozen=True, slots=True)
class URL:
    """The parts of a parsed URL that the CEL accessors read."""

    scheme: str = ""
    opaque: str = ""
    host: str = ""
    path: str = ""
    raw_path: str = ""
    raw_query: str = ""

    @property
    def hostname(self) -> str:
        return _split_host_port(self.host)[0]

    @property
    def port(self) -> str:
        return _split_host_port(self.host)[1]

    @property
    def escaped_path(self) -> str:
        if self.raw_path and _valid_encoded(self.raw_path):
            try:
                if _unescape(self.raw_path, "path") == self.path:
                    return self.raw_path
            except ValueError:
                pass
        return "*" if self.path == "*" else _escape(self.path, "path")

    @property
    def query(self) -> dict[str, list[str]]:
        """Go's ``Query()``: repeated keys collect their values; malformed pairs are dropped."""
        result: dict[str, list[str]] = {}
        if self.raw_query.count("&") + 1 > _MAX_QUERY_PARAMETERS:
            return result
        for pair in self.raw_query.split("&"):
            if not pair or ";" in pair:
                continue
            key, _, value = pair.partition("=")
            try:
                key, value = _unescape(key, "query"), _unescape(value, "query")
            except ValueError:
                continue
            result.setdefault(key, []).append(value)
        return result


def parse_url(raw: str, *, request_uri: bool = False) -> URL:
    """Go's ``url.Parse`` (``url.ParseRequestURI`` when ``request_uri``); raises ValueError with Go's message."""
    text = raw
    if not request_uri:
        text, _, fragment = raw.partition("#")
        if fragment:
            try:
                _unescape(fragment, "fragment")
            except ValueError as exc:
                raise ValueError(f"parse {go_quote(raw)}: {exc}") from None
    try:
        return _parse(text, request_uri)
    except ValueError as exc:
        raise ValueError(f"parse {go_quote(text)}: {exc}") from None


def _parse(raw: str, request_uri: bool) -> URL:
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in raw):
        raise ValueError("net/url: invalid control character in URL")
    if raw == "" and request_uri:
        raise ValueError("empty url")
    if raw == "*":
        return URL(path="*")
    scheme, rest = _split_scheme(raw)
    scheme = scheme.lower()
    raw_query = ""
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    else:
        rest, _, raw_query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return URL(scheme=scheme, opaque=rest, raw_query=raw_query)
        if request_uri:
            raise ValueError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    host = ""
    if (scheme or (not request_uri and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
        host = _parse_authority(scheme, authority)
    path = _unescape(rest, "path")
    raw_path = "" if _escape(path, "path") == rest else rest
    return URL(scheme=scheme, host=host, path=path, raw_path=raw_path, raw_query=raw_query)


def _split_scheme(raw: str) -> tuple[str, str]:
    for i, char in enumerate(raw):
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if i == 0:
                return "", raw
            continue
        if char == ":":
            if i == 0:
                raise ValueError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return "", raw
    return "", raw


def _parse_authority(scheme: str, authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    host = _parse_host(scheme, host)
    if at:
        if not all(char in _USERINFO for char in userinfo):
            raise ValueError("net/url: invalid userinfo")
        for part in userinfo.split(":", 1):
            _unescape(part, "userinfo")
    return host


def _parse_host(scheme: str, host: str) -> str:
    bracket = host.rfind("[")
    if bracket > 0:
        raise ValueError("invalid IP-literal")
    if bracket == 0:
        close = host.rfind("]")
        if close < 0:
            raise ValueError("missing ']' in host")
        colon_port = host[close + 1 :]
        if not _valid_optional_port(colon_port):
            raise ValueError(f"invalid port {go_quote(colon_port)} after host")
        colon_port = _unescape(colon_port, "host")
        literal = host[1:close]
        zone = literal.find("%25")
        if zone >= 0:
            literal = _unescape(literal[:zone], "host") + _unescape(literal[zone:], "zone")
        else:
            literal = _unescape(literal, "host")
        try:
            address = _parse_addr(literal)
        except ValueError as exc:
            raise ValueError(f"invalid host: {exc}") from None
        if address.version == 4:
            raise ValueError("invalid IP-literal")
        return f"[{literal}]{colon_port}"
    colon = host.find(":")
    if colon >= 0:
        if host.rfind(":") != colon and scheme not in ("http", "https"):
            colon = host.rfind(":")
        if not _valid_optional_port(host[colon:]):
            raise ValueError(f"invalid port {go_quote(host[colon:])} after host")
    return _unescape(host, "host")


def _valid_optional_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all("0" <= char <= "9" for char in port[1:]))


def _valid_encoded(text: str) -> bool:
    return all(char in "!$&'()*+,;=:@[]%" or not _should_escape(ord(char), "path") for char in text)


def _split_host_port(host_port: str) -> tuple[str, str]:
    host, port = host_port, ""
    colon = host.rfind(":")
    if colon >= 0 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


# ------------------------------------------------------------------ net/netip, with Kubernetes' restrictions


def _parse_addr(text: str) -> Address:
    """Go's ``netip.ParseAddr`` (zones allowed); the reason of a failure is Python's."""
    try:
        return ipaddress.IPv6Address(text) if ":" in text else ipaddress.IPv4Address(text)
    except ValueError as exc:
        raise ValueError(f"ParseAddr({go_quote(text)}): {exc}") from None


def parse_ip(text: str) -> Address:
    """An IP address as ``ip()`` accepts it; raises ValueError with the Kubernetes message."""
    try:
        address = _parse_addr(text)
    except ValueError as exc:
        raise ValueError(f"IP Address {go_quote(text)} parse error during conversion from string: {exc}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise ValueError(f"IP address {go_quote(text)} with zone value is not allowed")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return address


def parse_cidr(text: str) -> tuple[Address, int]:
    """A CIDR as ``cidr()`` accepts it: the address as written (not masked) and the prefix length."""
    prefix = "network address parse error during conversion from string: "

    def failure(reason: str) -> ValueError:
        return ValueError(f"{prefix}{prefix}netip.ParsePrefix({go_quote(text)}): {reason}")

    address_text, slash, bits = text.rpartition("/")
    if not slash:
        raise failure("no '/'")
    try:
        address = _parse_addr(address_text)
    except ValueError as exc:
        raise failure(str(exc)) from None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise failure("IPv6 zones cannot be present in a prefix")
    if not bits.isascii() or not bits.isdigit() or (len(bits) > 1 and bits[0] == "0"):
        raise failure(f"bad bits after slash: {go_quote(bits)}")
    if int(bits) > address.max_prefixlen:
        raise failure("prefix length out of range")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"{prefix}IPv4-mapped IPv6 address {go_quote(text)} is not allowed")
    return address, int(bits)


def network(address: Address, bits: int) -> Network:
    """The masked network of a CIDR."""
    return ipaddress.ip_network(f"{address}/{bits}", strict=False)


def is_link_local_multicast(address: Address) -> bool:
    """Go's ``IsLinkLocalMulticast``: 224.0.0.0/24, or ff02::/16 with any flags (``ffX2::``)."""
    if address.version == 4:
        return address.packed[:3] == b"\xe0\x00\x00"
    return int.from_bytes(address.packed[:2]) & 0xFF0F == 0xFF02


def is_global_unicast(address: Address) -> bool:
    """Go's ``IsGlobalUnicast``: private and unique-local addresses count, unlike Python's ``is_global``."""
    if address.version == 4 and int(address) in (0, 0xFFFFFFFF):
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast or address.is_link_local)
