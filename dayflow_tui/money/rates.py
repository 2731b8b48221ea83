"""Where a model's prices come from: ``genai-prices``, overrides from the settings file, the offline model.

Rates are dollars per million tokens, split the way Anthropic bills them:
uncached input, cache writes (5-minute and 1-hour lifetimes), cache reads
and output. Where the rates come from, first match wins:

1. ``[prices."MODEL"]`` in the settings file (or ``DAYFLOW_PRICES``): a
   negotiated rate, or a model the library does not know. ``MODEL`` matches
   that name and its dated ids (``claude-x-5`` also prices
   ``claude-x-5-20261001``, never ``claude-x-5-1``).
2. The offline model: free.
3. ``genai-prices`` (pinned in pyproject.toml), Anthropic's table, with its
   price history (a call is priced at the rates of the day it was made) and
   its long-context tiers (a request past a tier's input size pays the tier's
   rate on every token, as Anthropic bills it).

A model none of these knows has no price: callers show "price unknown",
never a guess.

Importing ``genai_prices`` costs the better part of a second (pydantic, httpx,
1.5 MB of price data), more than ``dayflow runs`` takes in all. So the rates
it gives for a model name are kept in a small JSON file in the state
directory, keyed by the exact library files they came from; a command that
shows costs imports the library only the first time it meets a model name.
The arithmetic on those rates (``money.cost``) is checked against the
library's own ``calc_price`` in the tests, model by model.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..config import settings as settings_module
from ..config.settings import OFFLINE_MODEL

LIBRARY = "genai-prices"
# The version pinned in pyproject.toml and the month it was published: the date of its price data.
PINNED_VERSION = "0.2.3"
PINNED_RELEASED = "2026-11"
PROVIDER = "anthropic"

MILLION = Decimal(1_000_000)  # rates are dollars per this many tokens
ZERO = Decimal(0)
# Anthropic's documented multipliers of the input rate, for an override that names only input and output.
CACHE_WRITE_5M_FACTOR = Decimal("1.25")
CACHE_WRITE_1H_FACTOR = Decimal("2")
CACHE_READ_FACTOR = Decimal("0.1")
# Web search is billed per search on top of tokens: "$10 per 1,000 searches" (the pricing page,
# https://platform.claude.com/docs/en/about-claude/pricing, "Web search tool"); genai-prices has no such rate.
WEB_SEARCH_USD_PER_1000 = Decimal("10")

PRICE_KEYS = ("input", "cache_write", "cache_write_1h", "cache_read", "output")
_LIBRARY_KEYS = {"input": "input_mtok", "cache_write": "cache_write_mtok", "cache_write_1h": "cache_write_1h_mtok",
                 "cache_read": "cache_read_mtok", "output": "output_mtok"}
_DATED = re.compile(r"^-(\d{8}|latest)$")


@dataclass(frozen=True)
class Rate:
    """Dollars per million tokens; past a tier's ``start`` (the request's whole input) the tier's rate applies."""

    base: Decimal
    tiers: tuple[tuple[int, Decimal], ...] = ()

    def at(self, request_input_tokens: int) -> Decimal:
        for start, price in reversed(self.tiers):
            if request_input_tokens > start:
                return price
        return self.base

    def to_json(self) -> Any:
        return [str(self.base), [[start, str(price)] for start, price in self.tiers]]

    @classmethod
    def from_json(cls, raw: Any) -> "Rate":
        base, tiers = raw
        return cls(Decimal(base), tuple((int(start), Decimal(price)) for start, price in tiers))


@dataclass(frozen=True)
class Period:
    """Rates in force from ``start`` (a UTC date; None: always) unless a later period is in force too."""

    start: date | None
    rates: dict[str, Rate]  # a subset of PRICE_KEYS; a missing cache rate bills those tokens as input


@dataclass(frozen=True)
class ModelPrices:
    """Everything known about one model name's prices."""

    model: str  # the name asked about
    source: str  # "genai-prices 0.2.3", "settings file", "offline model"
    name: str | None = None  # the library's name for it ("Claude Sonnet 4.5")
    periods: tuple[Period, ...] = ()

    def rates_on(self, day: date) -> dict[str, Rate]:
        # As the library does: the last period in force wins; when none is, the first.
        for period in reversed(self.periods):
            if period.start is None or day >= period.start:
                return period.rates
        return self.periods[0].rates

    @property
    def tier_starts(self) -> tuple[int, ...]:
        """Request sizes past which a rate changes; aggregate costs of larger requests are priced one by one."""
        return tuple(sorted({start for period in self.periods for rate in period.rates.values()
                             for start, _price in rate.tiers}))


def day_of(at: datetime | date | str | None) -> date:
    """The UTC day whose rates apply to a call made at ``at`` (None: today)."""
    if at is None:
        from .. import clock

        return clock.today()
    if isinstance(at, datetime):
        return (at.astimezone(timezone.utc) if at.tzinfo else at).date()
    if isinstance(at, date):
        return at
    return date.fromisoformat(str(at)[:10])


# -- where prices come from --------------------------------------------------------------------------


def _override_for(model: str, overrides: dict[str, dict[str, Decimal]]) -> tuple[str, dict[str, Decimal]] | None:
    if model in overrides:
        return model, overrides[model]
    for name, rates in overrides.items():
        if model.startswith(name) and _DATED.match(model[len(name):]):
            return name, rates
    return None


def override_prices(model: str, name: str, given: dict[str, Decimal]) -> ModelPrices:
    """An override's rates; cache rates it leaves out follow Anthropic's multipliers of its input rate."""
    rates = {key: Rate(value) for key, value in given.items()}
    base = given["input"]
    rates.setdefault("cache_write", Rate(base * CACHE_WRITE_5M_FACTOR))
    rates.setdefault("cache_write_1h", Rate(base * CACHE_WRITE_1H_FACTOR))
    rates.setdefault("cache_read", Rate(base * CACHE_READ_FACTOR))
    return ModelPrices(model=model, source=f"settings file [prices.\"{name}\"]", name=name,
                       periods=(Period(None, rates),))


def offline_prices() -> ModelPrices:
    free = Rate(ZERO)
    return ModelPrices(model=OFFLINE_MODEL, source="offline model (free)", name="offline",
                       periods=(Period(None, {key: free for key in PRICE_KEYS}),))


def lookup(model: str | None) -> ModelPrices | None:
    """The prices of ``model``, or None when nothing knows them."""
    if not model:
        return None
    overrides = settings_module.current().prices
    found = _override_for(model, overrides) if overrides else None
    if found is not None:
        return override_prices(model, *found)
    if model == OFFLINE_MODEL:
        return offline_prices()
    return _catalogue().get(model)


class _Catalogue:
    """The library's prices per model name, from memory, else the cache file, else the library itself."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, ModelPrices | None] = {}
        self._file: dict[str, Any] | None = None

    def get(self, model: str) -> ModelPrices | None:
        with self._lock:
            if model in self._known:
                return self._known[model]
            entry = self._from_file(model)
            if entry is None:
                entry = _library_entry(model)
                self._remember(model, entry)
            prices = _prices_from_entry(model, entry)
            self._known[model] = prices
            return prices

    def _cache_path(self) -> Path:
        return settings_module.current().state_home / "prices-cache.json"

    def _from_file(self, model: str) -> dict | None:
        if self._file is None:
            self._file = {"library": library_fingerprint(), "models": {}}
            try:
                stored = json.loads(self._cache_path().read_text(encoding="utf-8"))
                if isinstance(stored, dict) and stored.get("library") == self._file["library"]:
                    self._file = stored
            except (OSError, ValueError):
                pass
        entry = self._file.get("models", {}).get(model)
        return entry if isinstance(entry, dict) else None

    def _remember(self, model: str, entry: dict) -> None:
        assert self._file is not None
        self._file.setdefault("models", {})[model] = entry
        path = self._cache_path()
        try:  # a cache: written whole (rename), and a directory we cannot write only costs speed
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            scratch = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            scratch.write_text(json.dumps(self._file, separators=(",", ":")), encoding="utf-8")
            os.replace(scratch, path)
        except OSError:
            pass


_CATALOGUE: _Catalogue | None = None


def _catalogue() -> _Catalogue:
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = _Catalogue()
    return _CATALOGUE


def forget_cached_prices() -> None:
    """Drop what this process remembers (tests; ``dayflow prices`` after the cache file changed)."""
    global _CATALOGUE
    _CATALOGUE = None


def library_files() -> tuple[Path | None, str | None]:
    """The library's price data file and its installed version, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("genai_prices")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    package = Path(list(spec.submodule_search_locations)[0])
    version = None
    for info in package.parent.glob("genai_prices-*.dist-info"):
        version = info.name[len("genai_prices-"):-len(".dist-info")]
    return package / "data.py", version


def library_fingerprint() -> str:
    """Names the exact price data installed: a new version (or any edit of the file) empties the cache."""
    data, version = library_files()
    if data is None:
        return "missing"
    try:
        info = data.stat()
    except OSError:
        return f"{version}:unreadable"
    return f"{version}:{info.st_size}:{info.st_mtime_ns}"


def _library_entry(model: str) -> dict:
    """The cache file's entry for ``model``: the library's periods of rates, or ``{"unknown": true}``."""
    try:
        provider = _library_provider()
    except ImportError:
        return {"unknown": True, "why": f"{LIBRARY} is not installed"}
    info = provider.find_model(model)
    if info is None:
        return {"unknown": True}
    from genai_prices.types import ModelPrice, StartDateConstraint

    conditional = [(None, info.prices)] if isinstance(info.prices, ModelPrice) else \
        [(c.constraint, c.prices) for c in info.prices]
    periods = []
    for constraint, price in conditional:
        if constraint is not None and not isinstance(constraint, StartDateConstraint):
            return {"unknown": True, "why": f"{LIBRARY} prices {info.id} by time of day"}
        rates = {}
        for key, attribute in _LIBRARY_KEYS.items():
            value = getattr(price, attribute, None)
            if value is None:
                continue
            if isinstance(value, Decimal):
                rates[key] = Rate(value).to_json()
            else:  # TieredPrices
                rates[key] = Rate(value.base, tuple((t.start, t.price) for t in value.tiers)).to_json()
        if "input" not in rates or "output" not in rates:
            return {"unknown": True, "why": f"{LIBRARY} has no token prices for {info.id}"}
        periods.append([constraint.start_date.isoformat() if constraint is not None else None, rates])
    # Kept in the library's order: ``rates_on`` reads them as it does (last in force wins).
    return {"id": info.id, "name": info.name, "periods": periods}


def _prices_from_entry(model: str, entry: dict) -> ModelPrices | None:
    if entry.get("unknown"):
        return None
    try:
        periods = tuple(Period(date.fromisoformat(start) if start else None,
                               {key: Rate.from_json(raw) for key, raw in rates.items()})
                        for start, rates in entry["periods"])
    except (KeyError, TypeError, ValueError):
        return None  # a damaged cache entry is no price, never a wrong one
    if not periods:
        return None
    _data, version = library_files()
    return ModelPrices(model=model, source=f"{LIBRARY} {version or '?'}", name=entry.get("name"), periods=periods)


def _library_provider():
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    provider = next((p for p in snapshot.providers if p.id == PROVIDER), None)
    if provider is None:
        raise ImportError(f"{LIBRARY} has no {PROVIDER} provider")
    return provider


def library_models() -> list[tuple[str, str | None, ModelPrices]]:
    """Every Anthropic model the library prices: (id, name, prices). Imports the library (``dayflow prices``)."""
    provider = _library_provider()
    found = []
    for info in provider.models:
        entry = _library_entry(info.id)
        prices = _prices_from_entry(info.id, entry)
        if prices is not None:
            found.append((info.id, info.name, prices))
    return found


@dataclass(frozen=True)
class PriceSource:
    """What ``dayflow prices`` and ``dayflow --version`` say about where prices come from."""

    library: str
    version: str | None
    pinned: str
    released: str
    overrides: tuple[str, ...] = field(default_factory=tuple)

    def line(self) -> str:
        if self.version is None:
            text = f"{self.library}: not installed (every model but overrides: price unknown)"
        elif self.version == self.pinned:
            text = f"{self.library} {self.version} (price data released {self.released})"
        else:
            text = f"{self.library} {self.version} (pinned {self.pinned}, data date unknown)"
        if self.overrides:
            text += f"; overridden in settings: {', '.join(self.overrides)}"
        return text


def price_source() -> PriceSource:
    _data, version = library_files()
    return PriceSource(LIBRARY, version, PINNED_VERSION, PINNED_RELEASED,
                       tuple(sorted(settings_module.current().prices)))
