"""Untrusted text is made printable: controls become visible escapes, letters stay as they are."""

from dayflow_tui.safe_text import one_line, printable


def test_terminal_controls_become_visible_escapes():
    hostile = "a\x1b[2Jb\x1b]8;;http://x\x07link\x1b]8;;\x07\x9b31mc\x7fd\x00e"
    shown = printable(hostile)
    assert not any(ch in shown for ch in "\x1b\x07\x9b\x7f\x00")
    assert shown == "a\\x1b[2Jb\\x1b]8;;http://x\\x07link\\x1b]8;;\\x07\\x9b31mc\\x7fd\\x00e"


def test_bidi_overrides_are_escaped_but_right_to_left_text_is_shown():
    assert printable("invoice\u202egpj.exe") == "invoice\\u202egpj.exe"
    assert printable("\u2066x\u2069") == "\\u2066x\\u2069"
    assert printable("שלום مرحبا 🚀 [bold]x[/]") == "שלום مرحبا 🚀 [bold]x[/]"


def test_one_line_keeps_the_first_line_cut_to_width():
    assert one_line("first\x1b line\nsecond", 12) == "first\\x1b l…"
    assert one_line("tab\there", 20) == "tab here"
