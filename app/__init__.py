"""losswatch: reads training runs' scalars and says when a loss curve goes wrong."""
