"""What the test files share: tiny models and tokenizers, conversions, toy tasks, measurement of the suite.

Test files import from here (``from helpers.models import ...``), never from one another.
"""
