from __future__ import annotations

import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.utils.decorators import sync_and_async_middleware
from whitenoise.middleware import WhiteNoiseMiddleware

API_PREFIXES = ("/admin/api/", "/v1/")

# Every middleware here works in both modes: under the ASGI server a single sync-only one would
# push each request, streams included, through a thread.


@sync_and_async_middleware
def api_response_headers(get_response):
    """Gives every request an id and keeps API answers out of shared caches."""

    def mark(request, response):
        if request.path.startswith(API_PREFIXES):
            response["Cache-Control"] = "no-store"
            response["X-Request-Id"] = request.request_id
        return response

    if iscoroutinefunction(get_response):

        async def middleware(request):
            request.request_id = uuid.uuid4().hex
            return mark(request, await get_response(request))

    else:

        def middleware(request):
            request.request_id = uuid.uuid4().hex
            return mark(request, get_response(request))

    return middleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, which is sync-only, made usable in async mode: files are looked up in a
    thread, and only for paths under the static prefix."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return super().__call__(request)

    def _static_file(self, path: str):
        return self.find_file(path) if self.autorefresh else self.files.get(path)

    async def _acall(self, request):
        if request.path_info.startswith(self.static_prefix):
            static_file = await sync_to_async(self._static_file, thread_sensitive=False)(request.path_info)
            if static_file is not None:
                return self.serve(static_file, request)
        return await self.get_response(request)
