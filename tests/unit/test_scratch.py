"""``Scratch``: the on-disk set and map an export and an import keep their
growing keys in. An export writes its blobs in the order of ``sorted``, so the
order the scratch gives its keys in is part of the file's format."""

from __future__ import annotations

import hashlib

from cairn.store.scratch import Scratch


def test_keys_come_out_once_each_in_pythons_sorted_order() -> None:
    """Keys added twice are there once, counted once, and come out in the order
    Python's ``sorted`` gives: for hex digests, as an export writes its blobs,
    and for text beyond ASCII too."""
    digests = [hashlib.sha256(str(n).encode()).hexdigest() for n in range(600)]
    texts = ["b", "a", "é", "z", "Z", "日本", "\U0001f600", "ab"]
    with Scratch() as keys, Scratch() as words:
        for digest in digests + digests[:50]:
            keys.add(digest)
        for text in texts:
            words.add(text)
        assert len(keys) == 600
        assert list(keys.sorted()) == sorted(digests)
        assert list(words.sorted()) == sorted(texts)


def test_a_map_gives_each_keys_last_value_and_tells_a_missing_key() -> None:
    """``put`` maps a key to a value (the last one given); ``get`` gives it in a
    tuple, ``(None,)`` for a key added without one, and None for a key never
    given; an integer key is found as the same integer."""
    with Scratch() as scratch:
        scratch.put(1, 10)
        scratch.put(2, 20)
        scratch.put(1, 11)
        scratch.add(3)
        assert (scratch.get(1), scratch.get(2), scratch.get(3), scratch.get(4)) == (
            (11,),
            (20,),
            (None,),
            None,
        )
        assert 3 in scratch
        assert 4 not in scratch
        assert len(scratch) == 3
