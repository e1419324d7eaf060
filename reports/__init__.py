"""tck.reports: see SPEC.md and the design notes in README.md."""
