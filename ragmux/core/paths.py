"""Where the checkout and its data live, for the CLI (before settings load) and the settings."""

from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
# The embedded default keeps its databases, secrets and schedules here unless RAGMUX_DATA_DIR says otherwise.
DEFAULT_DATA_DIR = BASE_DIR / "var"
