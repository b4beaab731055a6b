"""LEAF's Shakespeare samples (issue 57, first part): the parser on a small hand-written play, the
windows and the split counted by hand; and the real plays' statistics beside LEAF's."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vecgossip.data.shakespeare import (SEQ, VOCAB, complete_works, encode, read_roles, role_text, roles, roles_of,
                                        speeches, split, usable, windows)

PLAY = """THE TRAGEDY OF TESTS

Persons Represented.

Kent.
A Fool.

ACT I.

SCENE I. A room.

[Enter Kent and Fool.]

Kent.
Good morrow,   fool.
[Aside] What news?

Fool.
None.

Kent.
Then go.

[Exeunt.]
"""


WORKS = """The Complete Works of William Shakespeare

Contents

THE SONNETS
by William Shakespeare

  From fairest creatures we desire increase,

THE TRAGEDY OF TESTS

by William Shakespeare

  KENT. Good morrow,
    fool.
  FOOL. None.

  Kent. Then go.
    Quickly.

THE COMEDY OF ERRORS

by William Shakespeare

ACT I. SCENE I.
DUKE. Proceed,
Solinus.
<<stage>>
AEGEON. Yes.

End of the Project Gutenberg EBook
"""


def test_a_hand_written_play_parses_into_its_speeches_and_roles():
    """The list of persons (before ACT I) is no speech; the bracketed directions and runs of
    spaces go; a block that is only a direction is no speech; names are upper-cased (LEAF)."""
    assert speeches(PLAY) == [("KENT", "Good morrow, fool. What news?"), ("FOOL", "None."), ("KENT", "Then go.")]
    got = roles({"tests": PLAY}, min_lines=1)
    assert [(r.name, r.lines) for r in got] == [("tests_KENT", ("Good morrow, fool. What news?", "Then go.")),
                                                ("tests_FOOL", ("None.",))]
    assert [r.name for r in roles({"tests": PLAY}, min_lines=2)] == ["tests_KENT"]


def test_the_complete_works_are_read_as_leaf_reads_them():
    """pg100's layout by hand: the sonnets (before the second author line) skipped; a speech at two
    spaces, continued at four; Kent and KENT one role; The Comedy of Errors unindented, its
    ACT line no speaker, a <...> line ending a speech."""
    plays = complete_works(WORKS)
    assert plays == {"THE TRAGEDY OF TESTS": [("KENT", "Good morrow,"), ("KENT", "fool."), ("FOOL", "None."),
                                              ("KENT", "Then go."), ("KENT", "Quickly.")],
                     "THE COMEDY OF ERRORS": [("DUKE", "Proceed,"), ("DUKE", "Solinus."), ("AEGEON", "Yes."),
                                              ("AEGEON", "")]}
    got = roles_of(plays)
    assert [r.name for r in got] == ["THE_TRAGEDY_OF_TESTS_KENT", "THE_TRAGEDY_OF_TESTS_FOOL",
                                     "THE_COMEDY_OF_ERRORS_DUKE", "THE_COMEDY_OF_ERRORS_AEGEON"]
    assert role_text(got[0].lines) == "Good morrow, fool. Then go. Quickly. "


def test_windows_are_leafs_by_hand():
    """LEAF's shake_utils: lines joined by newlines, newlines made spaces, runs of 2+ spaces cut to
    one: ("Ab  c", "de") -> "Ab c de " (8 characters); windows of 4: 4 samples by hand."""
    assert role_text(("Ab  c", "de")) == "Ab c de "
    x, y = windows(("Ab  c", "de"), seq=4)
    dec = lambda a: "".join(VOCAB[i] for i in a)  # noqa: E731
    assert [dec(w) for w in x] == ["Ab c", "b c ", " c d", "c de"] and dec(y) == " de "
    assert windows(("None.",))[0].shape == (0, SEQ)           # 6 characters: no 80-character window
    assert encode("é")[0] == VOCAB.index(" ")          # outside LEAF's vocabulary: the space


def test_leafs_contiguous_split_by_hand():
    """split_data.py for Shakespeare: train the first max(1, int(frac n)), test from 79 (seq - 1)
    after the last training window; no test window left: dropped."""
    train, test = split(20, 0.8, seq=4)
    assert train.tolist() == list(range(16)) and test.tolist() == [19]
    assert split(10, 0.8, seq=4) is None and split(1, 0.8) is None
    assert [a.tolist() for a in split(2, 0.8, seq=1)] == [[0], [1]]
    tr, te = split(1000, 0.8)
    assert tr.size == 800 and te[0] == 879 and te[-1] == 999


def test_the_plays_give_about_leafs_roles_and_samples(data_root):
    """LEAF's published statistics (Caldas et al. 2018, Table 1): 1,129 users, 4,226,158 samples,
    from Gutenberg's complete works; the 42 separate 1998 etexts here give 1,123 roles with at
    least one window and 3.83 M samples (another edition); 780 keep a test window after LEAF's
    contiguous split."""
    got = read_roles(Path(data_root))
    total = np.array([max(0, len(role_text(r.lines)) - SEQ) for r in got])
    assert 1100 <= (total > 0).sum() <= 1150 and 3.6e6 <= total.sum() <= 4.0e6
    assert 700 <= len(usable(got)) <= 850
