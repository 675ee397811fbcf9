"""What dprelease keeps on this machine, with the standard library alone: the one file-mode rule
(owner-only files and directories) and the user's data directory and processes."""
