"""The rulebook of collective semantics: every parser takes each rule from here, none keeps a copy.

names     which events are collectives, of what kind and element type, by which backend
values    the one policy for a value read from a file, and the bounds it must lie in
groups    process groups and rank mappings, in every layout PyTorch wrote
c10d      the arguments of each c10d dispatcher op, as data
sizes     split lists and unevenness
peers     the global rank on the other side of a send or recv
pairing   which backend work annotation belongs to which c10d dispatcher op
rows      the typed collective row every parser emits, and its one conversion to Arrow
finish    what every row passes before it is read: bounds, splits in elements, an unnamed group

The modules form layers (finish above peers above groups | sizes above the rest, rows at the
bottom), kept by the import contract `rulebook-layers` in pyproject.toml.
"""
