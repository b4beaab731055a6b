"""LEAF's Shakespeare task from the plays as plain text (issue 57, first part: the parser and the
samples; Caldas et al. 2018, arXiv 1812.01097, after McMahan et al. 2017, arXiv 1602.05629): one
client per speaking role of each play, next-character prediction.

The text (``../shared/data/shakespeare/*_gut.txt``, Project Gutenberg's 1998 etexts): in a play a
speech is a block of lines between blank lines whose first line is the speaker's name followed
by a full stop (``Kent.``, ``FIRST WITCH.``); stage directions are in square brackets. A block
before the play's first heading (``ACT``, ``SCENE``, ``PROLOGUE``, ``INDUCTION``: the list of
persons) or whose first line is not a name is not a speech.

- :func:`speeches`: a play's speeches in order, (speaker, text), the text's lines joined with one
  space and its bracketed directions removed;
- :func:`roles`: every (play, speaker) with at least ``min_lines`` speeches, in play then first
  appearance order;
- :func:`windows`: LEAF's samples (``shake_utils.py``): each speech is one line (its text and a
  newline, runs of spaces collapsed to one), prefixed by 80 spaces; every 80-character window
  of it is an input and the character after it the target;
- :func:`encode`: characters as indices into LEAF's 80-character vocabulary (:data:`VOCAB`,
  ``models/utils/language_utils.py``); a character outside it becomes the space (LEAF's own
  ``str.find`` gives it -1);
- :func:`split`: LEAF's split by sample (``split_data.py``): each role's samples drawn at random
  into train (``max(1, int(frac n))``, 1 of 2) and test; roles with fewer than 2 samples dropped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ = 80
SPEAKER = re.compile(r"^[A-Za-z][A-Za-z' ]{0,38}[A-Za-z]\.$")
HEADING = re.compile(r"^(ACT|SCENE|PROLOGUE|INDUCTION|EPILOGUE)\b", re.IGNORECASE)
DIRECTION = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True)
class Role:
    """One client: a speaking role of a play and its speeches, in order."""

    play: str
    speaker: str
    lines: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.play}_{self.speaker}"


def speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, speech) of every speech of a play, in order (see the module docstring)."""
    out, started = [], False
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = [ln.strip() for ln in block.strip("\n").split("\n") if ln.strip()]
        if not lines:
            continue
        if HEADING.match(lines[0]):
            started = True
            continue
        if not started or len(lines) < 2 or not SPEAKER.match(lines[0]) or HEADING.match(lines[0]):
            continue
        speech = re.sub(r" +", " ", DIRECTION.sub(" ", " ".join(lines[1:]))).strip()
        if speech:
            out.append((lines[0][:-1], speech))
    return out


def roles(plays: dict[str, str], min_lines: int = 1) -> list[Role]:
    """Every (play, speaker) with at least ``min_lines`` speeches; ``plays``: name -> text, taken
    in sorted name order, speakers in order of first appearance."""
    out = []
    for play in sorted(plays):
        by: dict[str, list[str]] = {}
        for speaker, speech in speeches(plays[play]):
            by.setdefault(speaker, []).append(speech)
        out += [Role(play, s, tuple(lines)) for s, lines in by.items() if len(lines) >= min_lines]
    return out


def encode(text: str) -> np.ndarray:
    """Indices into :data:`VOCAB` (uint8); a character outside it is the space's."""
    table = np.full(256, VOCAB.index(" "), np.uint8)
    for i, c in enumerate(VOCAB):
        table[ord(c)] = i
    codes = np.frombuffer(text.encode("latin-1", errors="replace"), np.uint8)
    return table[codes]


def windows(lines: tuple[str, ...] | list[str], seq: int = SEQ) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's samples of a role: (x (S, seq) uint8, y (S,) uint8), every window of each speech
    line (prefixed by ``seq`` spaces) and the character after it."""
    xs, ys = [], []
    for line in lines:
        full = encode(" " * seq + re.sub(r"  +", " ", line) + "\n")
        if full.size <= seq:
            continue
        idx = np.arange(full.size - seq)[:, None] + np.arange(seq)[None, :]
        xs.append(full[idx])
        ys.append(full[seq:])
    if not xs:
        return np.zeros((0, seq), np.uint8), np.zeros(0, np.uint8)
    return np.concatenate(xs), np.concatenate(ys)


def split(n: int, frac: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """LEAF's split by sample of one role's ``n`` samples: (train indices, test indices),
    ascending, ``max(1, int(frac n))`` of them in train (1 when n = 2), drawn without
    replacement; None when n < 2 (the role is dropped)."""
    if n < 2:
        return None
    k = 1 if n == 2 else max(1, int(frac * n))
    train = np.sort(rng.choice(n, k, replace=False))
    return train, np.setdiff1d(np.arange(n), train)
