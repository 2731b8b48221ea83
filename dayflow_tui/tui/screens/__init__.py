"""The dashboard's screens: run list, transcript, help."""
