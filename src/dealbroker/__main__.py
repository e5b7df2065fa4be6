from dealbroker.cli import app

app()
