"""Scheduled and orchestrated runs: the day's Prefect server (`server`, its authentication
`auth`), a schedule's binding (`binding`) and cron (`cron`), and the one module that imports
Prefect (`orchestrate`)."""
