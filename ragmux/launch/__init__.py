"""Starting and operating ragmux: the `ragmux` command and the machinery its subcommands run."""
