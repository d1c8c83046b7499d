"""Storage backends: each stores, locks and queries; the rules live in agentbox.rules."""
