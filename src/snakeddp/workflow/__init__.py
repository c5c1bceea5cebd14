"""What the Snakefile imports while it parses: never torch or Lightning, since every dry run pays for it."""
