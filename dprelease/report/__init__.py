"""Every report of a published release: the markdown budget report (`markdown`), what the
report command reads of a release and its JSON format (`published`), the HTML page (`html`)
and its figures (`figures`)."""
