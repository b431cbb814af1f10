"""The app's tabs, one module each (race, batch, walkthrough, explorer: each builds its own layout and events), on
what they share: lanes (the race and batch recorder, frame policy, colours, Run/Stop, error guard), inputs (the
sliders' table and checks), charts and models (the served models and their generation slots). app.py assembles them."""
