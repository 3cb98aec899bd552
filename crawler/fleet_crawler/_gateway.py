"""The gateway's proxy settings for each HTTP library (pure: no I/O, nothing imported but what a helper needs).

`fleet gateway` (docs/gateway.md) is a forward proxy; the options ride in the proxy username:
`CLIENT[-session-ID][-sesstime-MINUTES][-pool-NAME][-provider-P][-region-R][-zone-Z]`, in this order, the
client's token as the password. A value runs up to the next `-KEYWORD-` of a keyword that may still follow, so
`Gateway.username` refuses a value containing such a keyword between dashes (it would be read otherwise); the
tests check every username it builds against the gateway's own parser.

    gw = Gateway("http://fleet-gateway.fleet-system:8888", client="acme", token=TOKEN)
    requests.get(url, proxies=gw.requests(session="s1"))
    httpx.get(url, proxy=gw.url(session="s1"))
    await session.get(url, **gw.aiohttp(session="s1"))
    await browser.new_context(proxy=gw.playwright(session="s1"))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

KEYWORDS = ("session", "sesstime", "pool", "provider", "region", "zone")  # the gateway's order
MAX_SESSTIME = 1440  # minutes
_CLIENT = re.compile(r"[A-Za-z0-9_.]{1,64}", re.ASCII)
_VALUES = {
    "session": re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII),
    "pool": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII),
    "provider": re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII),
    "region": re.compile(r"[A-Za-z0-9._-]{1,128}", re.ASCII),
    "zone": re.compile(r"[A-Za-z0-9._-]{1,128}", re.ASCII),
}
BAN_REPORT = "http://fleet.gateway/v1/bans"  # through the gateway itself, with the same credentials


def username(client: str, *, session: str | None = None, sesstime: int | None = None, pool: str | None = None,
             provider: str | None = None, region: str | None = None, zone: str | None = None) -> str:
    """The gateway username for these options; ValueError naming what the gateway would refuse or misread."""
    if not _CLIENT.fullmatch(client):
        raise ValueError(f"client must be 1 to 64 letters, digits, '_' or '.', not {client!r}")
    values = {"session": session, "sesstime": None if sesstime is None else str(sesstime), "pool": pool,
              "provider": provider, "region": region, "zone": zone}
    if sesstime is not None and (isinstance(sesstime, bool) or not 1 <= sesstime <= MAX_SESSTIME):
        raise ValueError(f"sesstime must be 1 to {MAX_SESSTIME} minutes, not {sesstime!r}")
    out = [client]
    for i, word in enumerate(KEYWORDS):
        value = values[word]
        if value is None:
            continue
        if word in _VALUES and not _VALUES[word].fullmatch(value):
            raise ValueError(f"{word} {value!r} is not one the gateway takes")
        later = set(KEYWORDS[i + 1:])
        if any(part in later for part in value.split("-")):
            raise ValueError(f"{word} {value!r} contains -KEYWORD- of an option that may follow it "
                             f"({', '.join(sorted(later))}): the gateway would read it as that option")
        out += [word, value]
    return "-".join(out)


@dataclass(frozen=True)
class Gateway:
    """The gateway at `url` (http://HOST:PORT) for one client of its clients file and that client's token."""

    url: str
    client: str
    token: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme != "http" or not parts.hostname or parts.username or parts.path not in ("", "/"):
            raise ValueError(f"the gateway's URL must be http://HOST:PORT, not {self.url!r}")
        username(self.client)

    @property
    def server(self) -> str:
        """http://HOST:PORT, without credentials."""
        parts = urlsplit(self.url)
        return f"http://{parts.netloc}"

    def username(self, **options: Any) -> str:
        """The username for options session, sesstime, pool, provider, region, zone (module `username`)."""
        return username(self.client, **options)

    def proxy_url(self, **options: Any) -> str:
        """http://USERNAME:TOKEN@HOST:PORT (credentials percent-encoded): httpx's `proxy=`, Scrapy's
        meta["proxy"], the http_proxy environment variable."""
        netloc = urlsplit(self.url).netloc
        return f"http://{quote(self.username(**options), safe='')}:{quote(self.token, safe='')}@{netloc}"

    def requests(self, **options: Any) -> dict[str, str]:
        """requests' `proxies=`: the same proxy for http:// and https:// URLs."""
        url = self.proxy_url(**options)
        return {"http": url, "https": url}

    def httpx(self, **options: Any) -> str:
        """httpx's `proxy=` (httpx.Client(proxy=...) or httpx.get(url, proxy=...))."""
        return self.proxy_url(**options)

    def aiohttp(self, **options: Any) -> dict[str, str]:
        """aiohttp's request arguments: `proxy`, credentials in the URL (aiohttp sends them to the proxy, for
        plain requests and CONNECT alike; its `proxy_headers` reach only the CONNECT, and BasicAuth is
        deprecated). `session.get(url, **gw.aiohttp(session="s1"))`."""
        return {"proxy": self.proxy_url(**options)}

    def playwright(self, **options: Any) -> dict[str, str]:
        """Playwright's `proxy=` (browser.launch or browser.new_context): server, username, password."""
        return {"server": self.server, "username": self.username(**options), "password": self.token}

    @staticmethod
    def ban_report_url(host: str, proxy: str | None = None) -> str:
        """Where to POST a ban seen inside an HTTPS tunnel, through the gateway with the same proxy settings
        (docs/gateway.md, "Reporting a ban from inside a tunnel"); `proxy` (NAMESPACE/NAME) without a session."""
        query = {"host": host, **({"proxy": proxy} if proxy else {})}
        return f"{BAN_REPORT}?{urlencode(query)}"
