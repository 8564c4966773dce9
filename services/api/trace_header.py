"""The ``traceparent`` request header of a create or a trigger (W3C trace context)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header

from common.tracing.traceparent import HEADER

TraceparentHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description="W3C trace context (`00-<32 hex trace id>-<16 hex parent id>-<2 hex "
        "flags>`): kept with the job and its runs, handed to the handler (`ctx.trace`) and "
        "sent as `traceparent` on the callback. A header that is not a valid version-00 "
        "traceparent (all-zero ids, upper-case hex) is ignored, as the W3C spec asks, "
        "never refused",
    ),
]
