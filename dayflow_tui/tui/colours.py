"""Status colours that read: WCAG contrast, and a theme colour moved just enough to reach it.

Kept apart from the app: pure arithmetic on Textual's ``Color``, measured by the theme tests in full colour
and in the 256 colours a terminal such as tmux shows by default.
"""

from __future__ import annotations

from textual.color import Color

# The theme colours that carry a run's status; each is made to read on the background (``readable``).
STATUS_VARIABLES = ("text-success", "text-accent", "text-warning", "text-error", "text-secondary", "text-primary")
# WCAG asks 3:1 of status colours; 4.5:1 in full colour leaves room for a terminal that shows 256 colours
# (tmux's default), whose nearest palette entry measured 2.8:1 for atom-one-light's 3.2:1 green.
STATUS_CONTRAST = 4.5
STATUS_CONTRAST_256 = 3.0  # and the README's 3:1 in the colours a 256-colour terminal picks


def contrast_ratio(a: Color, b: Color) -> float:
    """WCAG 2.1 contrast of two colours (1 to 21)."""
    def luminance(colour: Color) -> float:
        def channel(value: int) -> float:
            c = value / 255
            return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(colour.r) + 0.7152 * channel(colour.g) + 0.0722 * channel(colour.b)

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def readable(colour: Color, background: Color, foreground: Color, wanted: float = STATUS_CONTRAST) -> Color:
    """``colour``, moved toward the theme's foreground just enough to reach ``wanted`` against the background
    (kept as it is when it already does; the foreground itself when nothing between does)."""
    for step in range(21):
        moved = colour.blend(foreground, step / 20)
        if contrast_ratio(moved, background) >= wanted and contrast_ratio(
                in_256_colours(moved), in_256_colours(background)) >= STATUS_CONTRAST_256:
            return moved
    return foreground


def in_256_colours(colour: Color) -> Color:
    """The colour a 256-colour terminal shows for ``colour`` (Rich's nearest palette entry)."""
    from rich.color import ColorSystem

    return Color.from_rich_color(colour.rich_color.downgrade(ColorSystem.EIGHT_BIT))
