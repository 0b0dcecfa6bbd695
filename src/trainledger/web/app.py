"""The web application of `trainledger serve`: the JSON API (api.py, figures.py) plus the one-page calculators in static/.

Needs the optional extra `trainledger[web]` (FastAPI, uvicorn). The page is plain HTML/CSS/JS shipped in
the package — no CDN, no build step — so it works offline; every number it shows comes from the API.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from trainledger import __version__
from trainledger.web import api, figures

STATIC_DIR = Path(__file__).with_name("static")


def create_app() -> FastAPI:
    """A FastAPI app serving /api/* (JSON answers of the CLI commands) and the page at /."""
    app = FastAPI(title="trainledger", version=__version__, docs_url="/api/docs", redoc_url=None,
                  openapi_url="/api/openapi.json")
    app.include_router(figures.router)  # before api.router, whose /api/{command} would match these paths
    app.include_router(api.router)
    app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
