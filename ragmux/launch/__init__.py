"""Starting ragmux: the `ragmux` command and what it sets up before anything serves."""
