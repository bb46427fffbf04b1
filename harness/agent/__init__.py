"""The agent trial (count_ids, scored on number and filter) and the scoreboard agent."""
