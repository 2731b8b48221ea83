"""The person's inbox and calendar, shipped with the package.

Dayflow has no mail or calendar account on these machines, so the read
tools serve this sample data. Dates are stored as offsets from "today" and
resolved against the clock (``clock.today()``), so a run made on any day
reads like a real Monday morning.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta

# (id, from, subject, body, days_ago, hh:mm)
_MAILS = [
    ("m-1001", "Priya Natarajan <priya@northwind.example>", "Q4 budget review: numbers needed by Thursday",
     "Hi, could you send me the updated Q4 infra numbers by Thursday? Finance locks the sheet Friday morning.",
     0, "07:42"),
    ("m-1002", "GitHub <noreply@github.example>", "[dayflow] CI passed on main",
     "All checks have passed for commit 4f2c1ab.", 0, "07:15"),
    ("m-1003", "Marco Bellini <marco@acme.example>", "Contract renewal - please sign",
     "Please review and sign the renewal for the Acme support contract. Legal needs it back by Friday.",
     0, "06:58"),
    ("m-1004", "Newsletter <digest@devweekly.example>", "Dev Weekly #412: SQLite in production",
     "This week: WAL mode, fsync and why your ORM is slower than it needs to be.", 1, "18:03"),
    ("m-1005", "Lena Fischer <lena@northwind.example>", "Can you review my PR on the billing service?",
     "Can you review PR #218 when you get a chance? It touches the invoice rounding, so a second pair of eyes helps.",
     1, "16:20"),
    ("m-1006", "Calendar <calendar@northwind.example>", "Updated invitation: Architecture sync",
     "The architecture sync moved to 14:00 today.", 1, "15:11"),
    ("m-1007", "Sam Okafor <sam@northwind.example>", "Lunch on Wednesday?",
     "Are you free for lunch on Wednesday? The new ramen place opened.", 1, "12:47"),
    ("m-1008", "IT Service Desk <it@northwind.example>", "Action required: laptop OS update",
     "Your laptop is two security updates behind. Please install the update before Monday.", 2, "09:30"),
    ("m-1009", "Aiko Tanaka <aiko@partner.example>", "Re: API rate limits",
     "Thanks, the new limits work for us. No further action needed on your side.", 2, "08:12"),
    ("m-1010", "Priya Natarajan <priya@northwind.example>", "Offsite agenda draft",
     "Could you add a 20-minute slot on incident reviews to the offsite agenda?", 2, "07:55"),
    ("m-1011", "Billing <billing@cloud.example>", "Your November invoice is ready",
     "Invoice INV-88213 for November is available in the console.", 3, "03:00"),
    ("m-1012", "Jonas Weber <jonas@northwind.example>", "Interview feedback for backend candidate",
     "Please submit your interview feedback for the backend candidate by tomorrow.", 3, "17:40"),
    ("m-1013", "Recruiting <jobs@careers.example>", "Exciting opportunity!!!",
     "We have an exciting opportunity that matches your profile.", 4, "11:11"),
    ("m-1014", "Mum <mum@family.example>", "Sunday dinner",
     "Dinner at ours on Sunday at 6? Bring nothing but yourself.", 4, "20:05"),
]

# (id, title, day offset, start, end, location)
_EVENTS = [
    ("e-2001", "Standup", 0, "09:30", "09:45", "Zoom"),
    ("e-2002", "1:1 with Priya", 0, "11:00", "11:30", "Room 4.12"),
    ("e-2003", "Architecture sync", 0, "14:00", "15:00", "Room 2.01"),
    ("e-2004", "Focus: billing PR review", 0, "15:30", "17:00", ""),
    ("e-2005", "Standup", 1, "09:30", "09:45", "Zoom"),
    ("e-2006", "Vendor call: Acme support", 1, "13:00", "13:45", "Phone"),
    ("e-2007", "Lunch with Sam", 2, "12:30", "13:30", "Ramen Ichiban"),
    ("e-2008", "Standup", 2, "09:30", "09:45", "Zoom"),
    ("e-2009", "Finance: Q4 lock", 3, "10:00", "10:30", "Room 1.03"),
    ("e-2010", "Standup", 3, "09:30", "09:45", "Zoom"),
    ("e-2011", "Offsite planning", 4, "10:00", "12:00", "Room 4.12"),
    ("e-2012", "Dinner at Mum's", 6, "18:00", "21:00", "Home"),
]

# Tasks a new database starts with (the person's own, not the agent's).


def _at(today: date, days: int, hhmm: str) -> str:
    hh, mm = (int(x) for x in hhmm.split(":"))
    return datetime.combine(today + timedelta(days=days), time(hh, mm)).isoformat(timespec="minutes")


def inbox(today: date) -> list[dict]:
    """Mails, newest first."""
    mails = [
        {"id": mid, "from": sender, "subject": subject, "received": _at(today, -ago, hhmm),
         "snippet": body, "unread": ago <= 1}
        for mid, sender, subject, body, ago, hhmm in _MAILS
    ]
    return sorted(mails, key=lambda m: m["received"], reverse=True)


def calendar(today: date, days: int) -> list[dict]:
    """Events from today up to (not including) today + days."""
    return [
        {"id": eid, "title": title, "start": _at(today, day, start), "end": _at(today, day, end),
         "location": location}
        for eid, title, day, start, end, location in _EVENTS
        if 0 <= day < days
    ]
