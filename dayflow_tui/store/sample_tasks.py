"""The open tasks a new database starts with, so the first brief has a task list to read.

Seeded once, when the database is created (data, not schema); the agent's
sample mail and calendar live in ``agent.sample_data``.
"""

# (idempotency_key, title, due in days from today or None, notes)
SEED_TASKS = [
    ("seed-1", "Renew passport", 14, "Appointment needed at the Bürgeramt."),
    ("seed-2", "Write Q1 OKR draft", 7, ""),
    ("seed-3", "Book dentist", None, ""),
]
