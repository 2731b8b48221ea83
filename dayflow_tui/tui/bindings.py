"""Key bindings, one list per screen. The help screen and the footer read these lists."""

from __future__ import annotations

from textual.binding import Binding

APP = [
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit (a run being driven stops after its current step)"),
    Binding("question_mark", "help", "Help", key_display="?", id="help", tooltip="List every key"),
    Binding("n", "new_run", "New run", id="new-run", tooltip="Start a new daily brief in the background"),
]

RUN_LIST = [
    Binding("r", "resume", "Resume", id="resume", tooltip="Resume an interrupted, failed or budget-stopped run"),
    Binding("d", "diff", "Diff", show=False, id="diff",
            tooltip="Compare two runs step by step: d on one, then d on the other"),
    Binding("B", "resume_with_budget", "Resume with budget", show=False, id="resume-with-budget",
            tooltip="See what resuming will cost and set the run's dollar budget first"),
    Binding("f", "cycle_filter(1)", "Filter", id="filter", tooltip="Cycle the status filter: the next status"),
    Binding("F", "cycle_filter(-1)", "Previous filter", key_display="F", show=False, id="filter-back",
            tooltip="Cycle the status filter backwards: the previous status"),
    Binding("slash", "search", "Search", key_display="/", id="search",
            tooltip="Search every run's text, tool calls and results as you type"),
    Binding("t", "tasks", "Tasks", id="tasks", tooltip="Every task the runs created, with the step that made it"),
    Binding("w", "workers", "Workers", show=False, id="workers",
            tooltip="The worker processes (alive, stale, stopped) and the runs each holds"),
    Binding("C", "cancel_run", "Cancel run", key_display="C", id="cancel-run",
            tooltip="Cancel the highlighted run for good (after a confirm): a call in flight is kept, nothing more runs"),
    Binding("s", "cycle_sort", "Sort", id="sort",
            tooltip="Sort by the next column: started, cost, steps, status, agent (the header marks it)"),
    Binding("S", "reverse_sort", "Reverse sort", key_display="S", show=False, id="reverse-sort",
            tooltip="The same sort the other way round"),
    Binding("c", "choose_columns", "Columns", show=False, id="columns", tooltip="Choose the columns shown"),
    Binding("y", "copy_id", "Copy id", show=False, id="copy-id", tooltip="Copy the run's id to the clipboard"),
    Binding("Y", "copy_resume", "Copy resume command", key_display="Y", show=False, id="copy-resume",
            tooltip="Copy `dayflow resume ID` (with --db when not the default database) to the clipboard"),
    Binding("X", "remove", "Remove", key_display="X", show=False, id="remove",
            tooltip="Remove the run (a done, failed or budget-stopped one), archived first if you like: "
            "dayflow prune --archive's rules"),
    Binding("escape", "clear_filters", "Clear filters", show=False, id="clear-filters"),
]

# The tasks screen (``t`` on the run list).
TASKS = [
    Binding("escape", "back", "Back", id="close-tasks", tooltip="Back to the run list"),
    Binding("slash", "filter", "Filter", key_display="/", id="filter-tasks",
            tooltip="Filter: words in the title or notes, open, done, run:ID"),
]

# The workers screen (``w`` on the run list).
WORKERS = [
    Binding("escape", "back", "Back", id="close-workers", tooltip="Back to the run list"),
    Binding("r", "refresh", "Refresh", id="refresh-workers", tooltip="Read the workers again (also every 2 s)"),
]

TRANSCRIPT = [
    Binding("escape,backspace", "back", "Back", id="back", tooltip="Back to the run list (or to the parent run)"),
    Binding("j,down", "step(1)", "Next step", key_display="j", id="next-step"),
    Binding("k,up", "step(-1)", "Prev step", key_display="k", show=False, id="prev-step"),
    Binding("g,home", "first_step", "First", key_display="g", show=False, id="first-step"),
    Binding("G,end", "last_step", "Last", key_display="G", show=False, id="last-step"),
    Binding("e", "expand", "Payloads", id="expand", tooltip="Fold or unfold every tool result payload"),
    Binding("v", "raw", "Raw JSON", id="raw", tooltip="The exact JSON stored for the step"),
    Binding("x", "next_request", "Next request", id="next-request",
            tooltip="The exact messages the next model call would send"),
    Binding("r", "resume", "Resume", id="resume", tooltip="Resume this run where it stopped (also the button)"),
    Binding("B", "resume_with_budget", "Resume with budget", show=False, id="resume-with-budget",
            tooltip="See what resuming will cost and set the run's dollar budget first"),
    Binding("dollar_sign", "chart_units", "Tokens/$", key_display="$", show=False, id="chart-units",
            tooltip="Switch the sparkline between tokens and dollars per step"),
    Binding("a", "approve", "Approve", id="approve",
            tooltip="Approve the marked calls (space marks), or the one under the cursor; the run goes on once "
            "none waits"),
    Binding("A", "approve_all", "Approve all", key_display="A", id="approve-all",
            tooltip="Approve every waiting call, after a confirm that lists what each will do"),
    Binding("d,D", "deny", "Deny", key_display="d", id="deny", tooltip="Refuse the marked calls (or the one under "
            "the cursor), with a reason the model is told"),
    Binding("F", "fork", "Fork here", show=False, id="fork",
            tooltip="Fork the run at the step on show (a new run from its first steps, with a note if you like)"),
    Binding("E", "edit_call", "Edit", id="edit-call",
            tooltip="Change the arguments of the call under the cursor, then approve it"),
    Binding("y", "copy_id", "Copy id", show=False, id="copy-id", tooltip="Copy the run's id to the clipboard"),
    Binding("Y", "copy_resume", "Copy resume command", key_display="Y", show=False, id="copy-resume",
            tooltip="Copy `dayflow resume ID` (with --db when not the default database) to the clipboard"),
    Binding("C", "cancel_run", "Cancel run", key_display="C", id="cancel-run-here",
            tooltip="Cancel this run for good (after a confirm): a call in flight is kept, nothing more runs"),
]


def line_cursor(*, letters: bool) -> list[Binding]:
    """Moving a line cursor (the run list, the JSON view): arrows, pages, the two ends, and with ``letters``
    j k g G too (the JSON view leaves those to its transcript, where they move between steps)."""
    def keys(key: str, letter: str) -> str:
        return f"{key},{letter}" if letters else key

    return [
        Binding(keys("up", "k"), "cursor(-1)", "Up", show=False),
        Binding(keys("down", "j"), "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding(keys("home", "g"), "edge(-1)", "First", show=False),
        Binding(keys("end", "G"), "edge(1)", "Last", show=False),
    ]


# The JSON view (v, and x's next request, in a transcript): its own keys while it has the focus.
JSON_VIEW = line_cursor(letters=False) + [
    Binding("left", "pan(-8)", "Left", show=False),
    Binding("right", "pan(8)", "Right", show=False),
    Binding("enter,space", "toggle", "Fold", id="json-fold", tooltip="Fold or unfold the payload under the cursor"),
    Binding("z", "toggle_all", "Fold all", id="json-fold-all", tooltip="Fold every payload, or unfold them all"),
    Binding("right_square_bracket", "payload(1)", "Next payload", key_display="]", show=False,
            id="json-next", tooltip="Move to the next payload"),
    Binding("left_square_bracket", "payload(-1)", "Prev payload", key_display="[", show=False,
            id="json-prev", tooltip="Move to the previous payload"),
    Binding("c", "copy(False)", "Copy", id="json-copy",
            tooltip="Copy the payload under the cursor to the clipboard (OSC 52)"),
    Binding("C", "copy(True)", "Copy all", key_display="C", show=False, id="json-copy-all",
            tooltip="Copy everything shown to the clipboard"),
    Binding("o", "open_editor", "Open in editor", id="json-open",
            tooltip="Open the payload under the cursor in $EDITOR (a temporary copy, read only)"),
]

# The search screen (``/`` on the run list) and the keys a transcript gains for searching.
SEARCH = [
    Binding("escape", "close", "Back", id="close-search", tooltip="Back to the run list, where it was"),
    Binding("down", "move(1)", "Next result", show=False, id="search-next"),
    Binding("up", "move(-1)", "Previous result", show=False, id="search-prev"),
    Binding("pagedown", "move(10)", "Page down", show=False, id="search-page-down"),
    Binding("pageup", "move(-10)", "Page up", show=False, id="search-page-up"),
]

# The step list's Enter: shown (and acted on) only on a step whose call started a subagent run (↳).
STEP_LIST = [Binding("enter", "select", "Open subagent", key_display="⏎", id="open-subagent",
                     tooltip="Open the subagent run the highlighted step's call started; Esc comes back here")]

TRANSCRIPT_SEARCH = [
    Binding("n", "next_match", "Next match", id="next-match", tooltip="Jump to the next match of the search"),
    Binding("N", "prev_match", "Prev match", key_display="N", show=False, id="prev-match",
            tooltip="Jump to the previous match of the search"),
    Binding("slash", "find", "Find", key_display="/", id="find-in-run", tooltip="Search this run"),
]

HELP = [
    Binding("escape,q,question_mark", "dismiss", "Close", key_display="esc", id="close-help"),
]

# What the help screen lists: (section, bindings) in reading order.
SECTIONS = (
    ("Everywhere", APP + [Binding("ctrl+p", "command_palette", "Command palette")]),
    ("Run list", [Binding("enter", "", "Open the highlighted run's transcript (or double-click)")] + RUN_LIST
     + [Binding("j,k,g,G", "", "Move; first; last"),
                             Binding("pageup,pagedown", "", "Page")]),
    ("Transcript", TRANSCRIPT + [Binding("space", "", "Mark or unmark the waiting call under the cursor "
                                         "(a and d act on the marked ones)"),
                                 Binding("enter", "", "Open the subagent run the step's call started (↳); "
                                         "Esc comes back to this step")] + TRANSCRIPT_SEARCH),
    ("JSON view (v, x)", [Binding("up,down,pageup,pagedown,home,end", "", "Move the cursor line"),
                          Binding("left,right", "", "Scroll sideways (long strings)")]
     + [binding for binding in JSON_VIEW if binding.id]),
    ("Tasks", [Binding("enter", "", "Open the run that made the task, at the step that made it")] + TASKS),
    ("Workers", [Binding("enter", "", "Open a run the worker holds")] + WORKERS),
    ("Search", [Binding("", "", "Type to search every run: words, \"a phrase\", -word, prefix*, "
                        "status:S tool:NAME run:ID in:text|args|result|error|final|task"),
                Binding("enter", "", "Open the run at its best match")] + SEARCH),
)


class SyncedBindings:
    """Mixin for screens whose actions show and hide with the data (resume, approve).

    ``check_action`` answers False for a key that does not apply to what is shown (resume on a done or
    waiting run): the footer leaves it out, so it offers only what applies. Pressed anyway, a resume key
    says why (``explain_refused_resume``).

    ``sync_bindings`` redraws the footer only when an action's availability
    changed: a footer rebuilt on every live tick flickers and costs time.
    """

    DYNAMIC_ACTIONS: tuple[str, ...] = ()
    # Keys of disabled resume actions: pressed anyway, they say why nothing happens instead of nothing.
    RESUME_KEYS = ("r", "B")

    def explain_refused_resume(self, event, run) -> None:
        """Call from ``on_key``: a resume key whose action is disabled gets a one-line reason."""
        if event.key not in self.RESUME_KEYS or run is None:
            return
        if self.check_action("resume", ()):
            return
        if (getattr(run, "source", None) or "dayflow") != "dayflow":
            event.stop()
            self.app.offer_claude_resume(run)  # an imported session: how to go on with it, not a refusal
            return
        blocker = self.app.resume_blocker(run)
        if blocker:
            event.stop()
            self.app.notify(f"Run {run.id} cannot be resumed: {blocker}.", severity="warning")

    def sync_bindings(self) -> None:
        state = tuple(self.check_action(action, ()) for action in self.DYNAMIC_ACTIONS)
        if state != getattr(self, "_binding_state", None):
            self._binding_state = state
            self.refresh_bindings()
