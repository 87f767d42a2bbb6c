"""Policy backtest: replay recorded signals through baseline and proposed policy sets."""
