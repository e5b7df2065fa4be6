"""The developer portal's members: people of an integration, how they log in, and their roles."""
