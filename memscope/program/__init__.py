"""Running the user's script as python would: the runner, how a run ends, where in the user's code something happened."""
