#!/usr/bin/env python3
"""A terminal screen (tmux `capture-pane -e -p`: text with SGR escape
sequences) as an SVG picture, one monospace cell per character.

    python3 scripts/ansi_svg.py < screen.ansi > screen.svg

Understands what Neovim in tmux emits: 16, 256 and 24-bit colours for the
foreground and the background, bold, italic, underline, reverse, and resets.
Wide characters (CJK, emoji) take two cells.
"""

import html
import re
import sys
import unicodedata

CELL_W, CELL_H, FONT = 8.4, 17, 14
DEFAULT_FG, DEFAULT_BG = "#d0d0d0", "#1c1c1c"
BASE16 = ["#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
          "#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"]
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
OTHER_ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def color256(n):
    if n < 16:
        return BASE16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (steps[n // 36], steps[n // 6 % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (v, v, v)


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = self.bg = None
        self.bold = self.italic = self.underline = self.reverse = False

    def key(self):
        return (self.fg, self.bg, self.bold, self.italic, self.underline, self.reverse)

    def apply(self, params):
        codes = [int(p) if p.isdigit() else 0 for p in re.split("[;:]", params)] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 3:
                self.italic = True
            elif c == 4:
                self.underline = True
            elif c == 7:
                self.reverse = True
            elif c == 22:
                self.bold = False
            elif c == 23:
                self.italic = False
            elif c == 24:
                self.underline = False
            elif c == 27:
                self.reverse = False
            elif 30 <= c <= 37 or 90 <= c <= 97:
                self.fg = BASE16[c - 30 if c < 90 else c - 90 + 8]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                self.bg = BASE16[c - 40 if c < 100 else c - 100 + 8]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48) and i + 1 < len(codes):
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    value = color256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    value = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                    i += 4
                else:
                    value = None
                if c == 38:
                    self.fg = value
                else:
                    self.bg = value
            i += 1


def width(ch):
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def runs(line, style):
    """(column, text, style key) runs of one screen line."""
    out, col, pos = [], 0, 0
    text, start, key = "", 0, style.key()
    while pos < len(line):
        m = SGR.match(line, pos)
        if m:
            if text:
                out.append((start, text, key))
            style.apply(m.group(1))
            text, start, key = "", col, style.key()
            pos = m.end()
            continue
        m = OTHER_ESC.match(line, pos)
        if m:
            pos = m.end()
            continue
        ch = line[pos]
        if not text:
            start = col
        text += ch
        col += width(ch)
        pos += 1
    if text:
        out.append((start, text, key))
    return out


def svg(screen, cols=None):
    lines = screen.rstrip("\n").split("\n")
    style = Style()
    rows = [runs(line, style) for line in lines]
    if cols is None:
        cols = max((start + sum(width(c) for c in text) for r in rows for start, text, _ in r), default=80)
    w, h = cols * CELL_W + 16, len(lines) * CELL_H + 16
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h}" viewBox="0 0 {w:.0f} {h}">',
        f'<rect width="100%" height="100%" rx="6" fill="{DEFAULT_BG}"/>',
        f'<g font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="{FONT}" '
        f'xml:space="preserve" transform="translate(8 8)">',
    ]
    for y, row in enumerate(rows):
        for start, text, (fg, bg, bold, italic, underline, reverse) in row:
            if reverse:
                fg, bg = bg or DEFAULT_BG, fg or DEFAULT_FG
            cells = sum(width(c) for c in text)
            if bg:
                parts.append(f'<rect x="{start * CELL_W:.1f}" y="{y * CELL_H}" width="{cells * CELL_W:.1f}" '
                             f'height="{CELL_H}" fill="{bg}"/>')
            if text.strip():
                attrs = [f'x="{start * CELL_W:.1f}"', f'y="{y * CELL_H + 13}"', f'fill="{fg or DEFAULT_FG}"',
                         f'textLength="{cells * CELL_W:.1f}"', 'lengthAdjust="spacingAndGlyphs"']
                if bold:
                    attrs.append('font-weight="bold"')
                if italic:
                    attrs.append('font-style="italic"')
                if underline:
                    attrs.append('text-decoration="underline"')
                parts.append(f"<text {' '.join(attrs)}>{html.escape(text)}</text>")
    parts.append("</g></svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(svg(sys.stdin.read()))
