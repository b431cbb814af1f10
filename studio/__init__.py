"""The app's UI, one module per tab (race, walkthrough, explorer) plus what they share; app.py wires it."""
