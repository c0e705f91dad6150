"""Splitters with the langchain-text-splitters API and exact spans."""

from tasks.split.base import Span, TextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter

__all__ = ["RecursiveCharacterTextSplitter", "Span", "TextSplitter"]
