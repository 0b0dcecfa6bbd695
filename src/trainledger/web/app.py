"""The web application of `trainledger serve`: the JSON API (api.py, figures.py) plus the one-page calculators in static/.

Needs the optional extra `trainledger[web]` (FastAPI, uvicorn). The page is plain HTML/CSS/JS shipped in
the package — no CDN, no build step — so it works offline; every number it shows comes from the API.
What the server refuses (foreign Host headers, server paths as models, unbounded work) is in guard.py.
There is no Swagger page (/api/docs would load its scripts from a CDN): /api/schema lists every command's flags
and /api/openapi.json the routes.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from trainledger import __version__
from trainledger.web import api, figures, guard, worker

STATIC_DIR = Path(__file__).with_name("static")


def create_app(host: str = "127.0.0.1", port: int | None = 8000, allow_hosts: tuple[str, ...] = (),
               config_dir: Path | None = None, max_request_seconds: float = guard.MAX_REQUEST_SECONDS) -> FastAPI:
    """A FastAPI app serving /api/* (JSON answers of the CLI commands) and the page at /, for a server listening on
    host:port (requests must name it in their Host header; see guard.py), reading configs only from `config_dir`,
    stopping any request's work after `max_request_seconds` at most (web/worker.py)."""
    settings = guard.WebSettings(host=host, port=port, allow_hosts=tuple(allow_hosts),
                                 config_dir=Path(config_dir).resolve() if config_dir is not None else None,
                                 max_request_seconds=max_request_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        worker.start()       # the fork server of heavy requests, ready before the first one
        yield
        guard.STORE.close()  # the private directory of custom configs goes with the server (`serve` kills running
                             # workers as soon as SIGTERM arrives: cli/serve.py)

    app = FastAPI(title="trainledger", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json", lifespan=lifespan)
    app.state.settings = settings
    app.add_middleware(guard.HostGuard, settings=settings)
    app.include_router(figures.router)  # before api.router, whose /api/{command} would match these paths
    app.include_router(api.router)
    app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
