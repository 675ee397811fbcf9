"""Pass 2 of loading a spec: one checker module per section of the YAML.

Each module is a set of small functions that take a :class:`~.reader.Reader` (the document and
the problems found so far) and what earlier sections produced, as explicit arguments, and
return typed values, or None (False for a table's measure) where a part is invalid, its
problems reported.
:mod:`dprelease.spec.load` calls them in order.
"""
