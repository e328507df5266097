"""/uploads: which of a manifest's contents the user still has to send, and the sending
(one tar stream of blobs, each member named by its SHA-256). launcher.server.uploads."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from launcher.api.server_store import User
from launcher.runtime.upload_manifest import UploadManifest
from launcher.server.auth import current_user
from launcher.server.uploads import UploadStore, check_manifest

router = APIRouter(prefix="/uploads")
BLOBS_PATH = "/uploads/blobs"
log = logging.getLogger("launcher.server")


class MissingBody(BaseModel):
    manifest: dict[str, Any]


@router.post("/missing")
def missing(body: MissingBody, request: Request,
            user: User = Depends(current_user)) -> dict[str, Any]:
    """Check the manifest (size limit, paths) and list the digests the server lacks."""
    manifest = UploadManifest.from_json(body.manifest)
    limit = request.app.state.limits.max_upload_bytes
    check_manifest(manifest, limit)
    return {"missing": UploadStore(user.name).missing(sorted(manifest.digests())),
            "limit": limit}


@router.post("/blobs")
async def blobs(request: Request, user: User = Depends(current_user)) -> dict[str, int]:
    """Store the blobs of a tar body (spooled to the user's directory first)."""
    store = await asyncio.to_thread(UploadStore, user.name)
    fd, tmp = tempfile.mkstemp(dir=store.root, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                f.write(chunk)
        files, size = await asyncio.to_thread(store.ingest_tar, Path(tmp),
                                              request.app.state.limits.max_upload_bytes)
    finally:
        Path(tmp).unlink(missing_ok=True)
    log.info("uploads: %s stored %d file(s), %d bytes", user.name, files, size)
    return {"files": files, "bytes": size}
