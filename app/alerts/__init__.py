"""Alert lifecycle and delivery: what becomes of a finding once it is stored."""
