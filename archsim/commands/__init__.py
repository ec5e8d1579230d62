"""Subcommands of the ``archsim`` CLI, one module each (registered in :data:`archsim.cli.SUBCOMMANDS`)."""
