"""A published release's layout on disk: where each table, measurement and manifest goes
(`layout`), what the manifest states (`manifest`), and reading a release back (`reading`)."""
