"""Upload memory: the web process's RSS while it takes a file of N bytes through
`POST /admin/api/rag-stores/{id}/documents`, and after.

    python bench/upload_memory.py [--sizes-mb 10,50,100] [--smoke]

Runs the production server (`ragmux serve`'s uvicorn command, one worker) on the bench
services, without a Celery worker (the documents stay pending, so only admission is measured).
Each size is uploaded twice, each time a new PDF-looking file (`%PDF-1.4` then random bytes: no
duplicate, no text cap). The server's RSS is sampled every ~5 ms during the request; the kernel's
own high-water mark (VmHWM, reset before each request) is reported beside it as a check on the
sampling. Reported per upload: RSS before, peak growth, growth / N, and RSS growth 2 s after.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from harness import REPO, BenchEnvironment, fresh_store, local_connection, print_table, report, wait_for

MIB = 2**20
SAMPLE_SECONDS = 0.005
SETTLE_SECONDS = 2.0
PASSWORD = "bench-upload-memory-password"


class RssSampler:
    """Samples a process's RSS on a thread of its own while a request runs; keeps the peak."""

    def __init__(self, process: psutil.Process):
        self.process = process
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self.samples += 1
            time.sleep(SAMPLE_SECONDS)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()


def reset_high_water_mark(pid: int) -> bool:
    """Resets the kernel's peak RSS of ``pid`` (Linux 4.0+); False where that is not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def high_water_mark(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc status")


def pdf_file(folder: Path, size: int, serial: int) -> Path:
    """A file of ``size`` bytes that passes as a PDF at upload, of content no other upload has."""
    path = folder / f"bench-{serial}-{size // MIB}mb.pdf"
    header = b"%PDF-1.4\n"
    with open(path, "wb") as handle:
        handle.write(header)
        remaining = size - len(header)
        while remaining:
            block = os.urandom(min(remaining, 4 * MIB))
            handle.write(block)
            remaining -= len(block)
    return path


def measure_upload(client: httpx.Client, url: str, path: Path, server: psutil.Process) -> dict:
    size = path.stat().st_size
    before = server.memory_info().rss
    hwm_reset = reset_high_water_mark(server.pid)
    with RssSampler(server) as sampler, open(path, "rb") as handle:
        started = time.monotonic()
        response = client.post(url, files={"file": (path.name, handle, "application/pdf")})
        seconds = time.monotonic() - started
    if response.status_code != 202:
        raise SystemExit(f"upload of {path.name} answered {response.status_code}: {response.text[:500]}")
    hwm = high_water_mark(server.pid) if hwm_reset else None
    time.sleep(SETTLE_SECONDS)
    after = server.memory_info().rss
    return {
        "size_mb": round(size / MIB, 1),
        "seconds": round(seconds, 2),
        "samples": sampler.samples,
        "rss_before_mb": round(before / MIB, 1),
        "peak_growth_mb": round((sampler.peak - before) / MIB, 1),
        "peak_growth_per_n": round((sampler.peak - before) / size, 2),
        "hwm_growth_per_n": round((hwm - before) / size, 2) if hwm is not None else None,
        "growth_after_2s_mb": round((after - before) / MIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="10,50,100", help="upload sizes in MiB, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="1 and 2 MiB uploads, to check the script runs")
    args = parser.parse_args()
    sizes = [1, 2] if args.smoke else [int(size) for size in args.sizes_mb.split(",")]

    from ragmux.launch.embedded import free_port

    port = free_port()
    settings = {
        "PORT": str(port),
        "WEB_WORKERS": "1",
        "LOG_LEVEL": "warning",
        "MAX_UPLOAD_MB": str(max(sizes) + 1),
    }
    with BenchEnvironment(settings=settings), tempfile.TemporaryDirectory(prefix="ragmux-upload-") as folder:
        from django.contrib.auth.models import User

        from ragmux.core.accounts import user_create
        from ragmux.launch.processes import web_command

        User.objects.filter(username="bench-upload").delete()
        user_create(username="bench-upload", password=PASSWORD, role="admin")
        store = fresh_store("bench-upload-memory", local_connection())
        server = subprocess.Popen(web_command(), cwd=REPO, env=dict(os.environ), stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            if not wait_for(lambda: _up(base), timeout=60, poll=0.2):
                raise SystemExit("the web server did not start")
            process = psutil.Process(server.pid)
            with httpx.Client(base_url=base, timeout=600) as client:
                login = client.post(
                    "/admin/api/login", json={"username": "bench-upload", "password": PASSWORD, "bearer": True}
                )
                login.raise_for_status()
                client.headers["Authorization"] = f"Bearer {login.json()['token']}"
                url = f"/admin/api/rag-stores/{store.id}/documents"
                # Warm-up: imports, the database connection and the first allocations of an upload.
                measure_upload(client, url, pdf_file(Path(folder), MIB, 0), process)
                baseline = process.memory_info().rss
                rows = []
                for serial, size in enumerate((size for size in sizes for _ in range(2)), start=1):
                    path = pdf_file(Path(folder), size * MIB, serial)
                    rows.append(measure_upload(client, url, path, process))
                    path.unlink()
                final = process.memory_info().rss
        finally:
            server.terminate()
            server.wait(timeout=30)

    print_table(
        [tuple(row.values()) for row in rows],
        tuple(rows[0].keys()),
    )
    print(f"baseline after warm-up {baseline / MIB:.1f} MiB; after all uploads {final / MIB:.1f} MiB")
    report(
        {
            "bench": "upload_memory",
            "baseline_rss_mb": round(baseline / MIB, 1),
            "final_rss_mb": round(final / MIB, 1),
            "final_growth_mb": round((final - baseline) / MIB, 1),
            "max_peak_growth_per_n": max(row["peak_growth_per_n"] for row in rows),
            "uploads": rows,
        }
    )


def _up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
