# The run manager (server/runs/).
