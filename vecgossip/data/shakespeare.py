"""LEAF's Shakespeare task (Caldas et al. 2018, arXiv 1812.01097, after McMahan et al. 2017, arXiv
1602.05629, section 3): one client per speaking role of each play, next-character prediction
(``data=shakespeare``; docs: Text: Shakespeare).

Two sources, one construction:

- the plays as separate Project Gutenberg etexts (``<data.root>/shakespeare/*_gut.txt``, the 1998
  modern-spelling texts): a speech is a block of lines between blank lines whose first line is the
  speaker's name and a full stop (``Kent.``, ``FIRST WITCH.``); stage directions are in square
  brackets; blocks before a play's first heading (``ACT``, ``SCENE``, ``PROLOGUE``, ...: the list
  of persons) are no speech (:func:`speeches`);
- Gutenberg's complete works in one file (``data.text_file``, e.g. ``pg100.txt``, LEAF's own
  source), read as LEAF's ``preprocess_shakespeare.py`` reads it (:func:`complete_works`): a play
  starts at a ``by William Shakespeare`` line (its title the first non-blank line of the few above;
  what comes before the second such line, the contents and the sonnets, is skipped); a speech
  starts at a line indented by two spaces holding ``NAME. text`` and continues on lines indented
  by four; The Comedy of Errors, unindented in that file, is read without the indentation.

Then, as LEAF does (``shake_utils.py``, ``split_data.py``):

- speakers' names upper-cased (LEAF merges casings such as ``Sir Toby`` / ``SIR TOBY``), one role
  per (play, speaker) with at least ``min_lines`` speeches (:func:`roles`);
- a role's text: its speeches joined by spaces (LEAF writes one line per sound bite, then reads
  them back with newlines turned into spaces), runs of two or more spaces cut to one
  (:func:`role_text`); every 80-character window of it is an input, the character after it the
  target (:func:`windows`): a role of L characters gives L - 80 samples;
- characters as indices into LEAF's 80-character vocabulary (:data:`VOCAB`,
  ``models/utils/language_utils.py``); one outside it becomes the space's (LEAF's ``str.find``
  gives it -1) (:func:`encode`);
- the split by sample, contiguous for Shakespeare (:func:`split`): the first ``max(1, int(frac
  n))`` windows train, the test windows start 79 after the last training window (no test input
  overlaps a training target); a role with under 2 samples, or no test window left, is dropped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ = 80
FRAC = 0.8            # the FedAvg paper's train share (LEAF's full-size command: -tf 0.8)
SPEAKER = re.compile(r"^[A-Za-z][A-Za-z' ]{0,38}[A-Za-z]\.$")
HEADING = re.compile(r"^(ACT|SCENE|PROLOGUE|INDUCTION|EPILOGUE)\b", re.IGNORECASE)
DIRECTION = re.compile(r"\[[^\]]*\]")
AUTHOR = "by William Shakespeare"
WORKS_SPEAKER = re.compile(r"^  ([a-zA-Z][a-zA-Z ]*)\. (.*)")
WORKS_MORE = re.compile(r"^    (.*)")
WORKS_SPEAKER_UNINDENTED = re.compile(r"^([a-zA-Z][a-zA-Z ]*)\. (.*)")
WORKS_END = ("End of the Project Gutenberg", "End of Project Gutenberg", "*** END OF")


@dataclass(frozen=True)
class Role:
    """One client: a speaking role of a play and its speeches, in order."""

    play: str
    speaker: str
    lines: tuple[str, ...]

    @property
    def name(self) -> str:
        return re.sub(r"\W+", "_", f"{self.play}_{self.speaker}".replace(" ", "_"))


def speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, speech) of every speech of one play's etext, in order (module docstring)."""
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
            out.append((lines[0][:-1].upper(), speech))
    return out


def complete_works(text: str) -> dict[str, list[tuple[str, str]]]:
    """{play title: [(speaker, sound bite), ...]} from Gutenberg's complete works, read as LEAF
    reads it (module docstring): a sound bite is one line of a speech; plays with fewer than two
    speakers are dropped."""
    lines = text.replace("\r\n", "\n").split("\n")
    authors = [i for i, ln in enumerate(lines) if AUTHOR in ln]
    if len(authors) < 2:
        return {}
    plays: dict[str, list[tuple[str, str]]] = {}
    current, bites, unindented = None, None, False
    for i in range(authors[1], len(lines)):
        line = lines[i]
        if line.startswith(WORKS_END):
            break
        if AUTHOR in line:
            title = next((lines[j].strip() for j in range(i - 2, max(i - 8, -1), -1) if lines[j].strip()), f"play {i}")
            bites, current, unindented = plays.setdefault(title, []), None, title == "THE COMEDY OF ERRORS"
            continue
        if bites is None:
            continue
        match = (WORKS_SPEAKER_UNINDENTED if unindented else WORKS_SPEAKER).match(line)
        if match:
            speaker = match.group(1).upper()
            if unindented and speaker.startswith("ACT "):
                current = None
                continue
            current = speaker
            bites.append((speaker, match.group(2)))
            continue
        if current is not None:
            more = (re.match(r"^(.*)", line) if unindented else WORKS_MORE.match(line))
            if more and unindented and more.group(1).startswith("<"):
                current = None
            elif more:                         # another line is not consumed, the speaker stays
                bites.append((current, more.group(1)))
    return {title: b for title, b in plays.items() if len({s for s, _ in b}) > 1}


def roles(plays: dict[str, str], min_lines: int = 1) -> list[Role]:
    """Every (play, speaker) of the etexts ``plays`` (name -> text, taken in sorted name order)
    with at least ``min_lines`` speeches, speakers in order of first appearance."""
    return roles_of({play: speeches(plays[play]) for play in sorted(plays)}, min_lines)


def roles_of(plays: dict[str, list[tuple[str, str]]], min_lines: int = 1) -> list[Role]:
    """Roles from {play: [(speaker, text), ...]} (speeches or sound bites), plays in the given order."""
    out = []
    for play, said in plays.items():
        by: dict[str, list[str]] = {}
        for speaker, speech in said:
            by.setdefault(speaker, []).append(speech)
        out += [Role(play, s, tuple(lines)) for s, lines in by.items() if len(lines) >= min_lines]
    return out


def role_text(lines: tuple[str, ...] | list[str]) -> str:
    """A role's text as LEAF builds it: every line and a newline, newlines made spaces, runs of
    two or more spaces cut to one."""
    return re.sub(r"  +", " ", "".join(f"{line}\n" for line in lines).replace("\n", " "))


def encode(text: str) -> np.ndarray:
    """Indices into :data:`VOCAB` (uint8); a character outside it is the space's."""
    table = np.full(256, VOCAB.index(" "), np.uint8)
    for i, c in enumerate(VOCAB):
        table[ord(c)] = i
    codes = np.frombuffer(text.encode("latin-1", errors="replace"), np.uint8)
    return table[codes]


def windows(lines: tuple[str, ...] | list[str], seq: int = SEQ) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's samples of a role: (x (S, seq) uint8, y (S,) uint8): window i is characters
    i .. i + seq - 1 of :func:`role_text`, its target character i + seq; S = max(0, L - seq)."""
    full = encode(role_text(lines))
    if full.size <= seq:
        return np.zeros((0, seq), np.uint8), np.zeros(0, np.uint8)
    x = np.lib.stride_tricks.sliding_window_view(full, seq)[: full.size - seq]
    return np.ascontiguousarray(x), full[seq:].copy()


def split(n: int, frac: float = FRAC, seq: int = SEQ) -> tuple[np.ndarray, np.ndarray] | None:
    """LEAF's contiguous split of a role's ``n`` windows: (train indices, test indices): train
    0 .. k - 1 with k = max(1, int(frac n)) (1 when n = 2), test k + seq - 1 .. n - 1; None when
    n < 2 or no test window remains (the role is dropped)."""
    if n < 2:
        return None
    k = 1 if n == 2 else max(1, int(frac * n))
    test = np.arange(k + seq - 1, n)
    return (np.arange(k), test) if test.size else None


@dataclass(frozen=True)
class TextSplit:
    """The kept roles' windows: train ``x`` (M, 80) uint8, ``y`` (M,) with role r's windows at
    ``offsets[r]:offsets[r+1]``; the same for the test windows."""

    names: tuple[str, ...]
    x: np.ndarray
    y: np.ndarray
    offsets: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    test_offsets: np.ndarray


def read_roles(root: Path, text_file: str | None = None, min_lines: int = 1) -> list[Role]:
    """The roles of the etexts under ``root``/shakespeare, or of the complete works ``text_file``."""
    if text_file:
        return roles_of(complete_works(Path(text_file).expanduser().read_text(encoding="utf-8", errors="replace")),
                        min_lines)
    files = sorted((Path(root) / "shakespeare").glob("*_gut.txt"))
    return roles({p.stem.removesuffix("_gut"): p.read_text(encoding="latin-1") for p in files}, min_lines)


def usable(chosen: list[Role], frac: float = FRAC) -> list[Role]:
    """The roles LEAF keeps after its split (:func:`split` not None), in order."""
    return [r for r in chosen if split(max(0, len(role_text(r.lines)) - SEQ), frac) is not None]


def build(chosen: list[Role], frac: float = FRAC) -> TextSplit:
    """The windows of ``chosen`` roles (each must be :func:`usable`), split as LEAF splits them."""
    parts = {"x": [], "y": [], "tx": [], "ty": []}
    for r in chosen:
        x, y = windows(r.lines)
        tr, te = split(x.shape[0], frac)
        parts["x"].append(x[tr])
        parts["y"].append(y[tr])
        parts["tx"].append(x[te])
        parts["ty"].append(y[te])
    off = lambda key: np.concatenate([[0], np.cumsum([a.shape[0] for a in parts[key]])]).astype(np.int64)  # noqa: E731
    cat = lambda key, d: np.concatenate(parts[key]) if parts[key] else np.zeros((0, SEQ)[:d], np.uint8)  # noqa: E731
    return TextSplit(tuple(r.name for r in chosen), cat("x", 2), cat("y", 1), off("x"),
                     cat("tx", 2), cat("ty", 1), off("tx"))
