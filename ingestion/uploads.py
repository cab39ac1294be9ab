"""Stops an uploaded file at MAX_UPLOAD_MB while it streams in, so an oversize upload never
reaches the disk or memory in full."""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from ragmux.core.errors import TooLarge
from ragmux.core.units import MIB


class CappedUploadHandler(FileUploadHandler):
    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > settings.MAX_UPLOAD_MB * MIB:
            self.request.oversize_upload = self.file_name
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def oversize_upload(request) -> None:
    """Refuses the request when the handler above cut a file off; nothing of it was stored.
    Takes the API's DRF request or the dashboard's Django request."""
    oversize = getattr(getattr(request, "_request", request), "oversize_upload", None)
    if oversize is not None:
        raise TooLarge(
            f'"{oversize}" is larger than {settings.MAX_UPLOAD_MB} MiB (MAX_UPLOAD_MB); nothing was stored',
            code="upload_too_large",
        )
