"""A trivial HTTP server that answers every request 429: the control of bench/auth_flood.py.

It is served by uvicorn as ``kairos api`` is (same event loop and HTTP parser, one
process, no access log), so a flood aimed at it costs the machine what any Python
server answering it would: the flood's own client threads, the sockets, the HTTP
parsing. The good app's latency while this server is flooded is the part of a flood's
effect that no change inside Kairos can remove on the same machine.

    .venv/bin/python bench/refusing_server.py --port 8099
"""

from __future__ import annotations

import argparse

import uvicorn
from starlette.types import Receive, Scope, Send

BODY = (
    b'{"type":"urn:kairos:problem:auth-throttled","title":"Too Many Requests",'
    b'"status":429,"detail":"too many failed authentications from this address"}'
)
HEADERS = [
    (b"content-type", b"application/problem+json"),
    (b"content-length", str(len(BODY)).encode()),
    (b"retry-after", b"60"),
]


async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer any HTTP request 429 with a short problem body; ignore lifespan."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 429, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def main() -> None:
    """Serve on ``--port`` until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        refuse, host="127.0.0.1", port=args.port, log_config=None, access_log=False, lifespan="off"
    )


if __name__ == "__main__":
    main()
