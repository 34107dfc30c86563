"""Diverse chat prompts for self-distillation, made from templates x subjects (no data download).

``train_prompts()`` and ``heldout_prompts()`` share no template and no subject: the held-out
set measures the head on requests of kinds it never saw.
"""

from __future__ import annotations

import random

TEMPLATES_TRAIN = [
    "What is {s}?",
    "Explain {s} in simple terms.",
    "Give me three interesting facts about {s}.",
    "Why is {s} important?",
    "Write a short poem about {s}.",
    "Describe {s} to a ten-year-old.",
    "What are the pros and cons of {s}?",
    "How does {s} work?",
    "Write a short story that involves {s}.",
    "What is the history of {s}?",
    "List five things people often get wrong about {s}.",
    "Can you summarize what {s} is in two sentences?",
    "What should a beginner know about {s}?",
    "Write a haiku about {s}.",
    "How would you explain {s} to someone who has never heard of it?",
    "What are some common uses of {s}?",
    "Give me a fun fact about {s}.",
    "Write a friendly email to a colleague about {s}.",
    "What questions should I ask to learn more about {s}?",
    "Compare {s} with something similar and explain the difference.",
    "What is the future of {s}?",
    "Tell me a joke about {s}.",
    "Write a product description for something related to {s}.",
    "What are the main ideas behind {s}?",
]

# Session 13: more train templates (none a paraphrase of a held-out one). Their prompts come after the first
# 5,688 in ``train_prompts()``, shuffled apart, so the indices of gen.jsonl's earlier answers stay valid.
TEMPLATES_TRAIN_2 = [
    "Write a short blog post introduction about {s}.",
    "What are some surprising things about {s}?",
    "Give me a step-by-step guide related to {s}.",
    "Write a dialogue between two friends discussing {s}.",
    "Create a quiz with three questions about {s}.",
    "Write a tweet about {s}.",
    "What are the biggest challenges related to {s}?",
    "Explain {s} using an analogy.",
    "Write a short speech about {s}.",
    "What do experts say about {s}?",
    "Describe {s} in one paragraph.",
    "Write a list of do's and don'ts about {s}.",
    "How has {s} changed over time?",
    "Write a diary entry from someone who loves {s}.",
    "What are the key terms to know about {s}?",
    "Write a short news report about {s}.",
]

TEMPLATES_HELDOUT = [
    "Could you tell me about {s}?",
    "I am curious about {s}. What can you tell me?",
    "Write a limerick about {s}.",
    "What are three tips for someone interested in {s}?",
    "In a few sentences, what makes {s} special?",
    "Teach me the basics of {s}.",
]

SUBJECTS = [
    "photosynthesis", "the water cycle", "black holes", "the moon", "volcanoes", "earthquakes", "gravity",
    "electricity", "magnets", "the solar system", "climate change", "recycling", "rainbows", "the ocean",
    "coral reefs", "the rainforest", "deserts", "glaciers", "the human heart", "the brain", "sleep",
    "exercise", "healthy eating", "vitamins", "the immune system", "vaccines", "bacteria", "DNA",
    "evolution", "dinosaurs", "honeybees", "ants", "dolphins", "elephants", "cats", "dogs", "owls",
    "butterflies", "sharks", "penguins", "trees", "flowers", "mushrooms", "gardening", "composting",
    "cooking pasta", "baking bread", "coffee", "tea", "chocolate", "pizza", "sushi", "spices",
    "the internet", "computers", "smartphones", "artificial intelligence", "machine learning",
    "programming", "Python", "databases", "cybersecurity", "passwords", "email", "social media",
    "video games", "robots", "3D printing", "electric cars", "bicycles", "trains", "airplanes",
    "rockets", "satellites", "the Eiffel Tower", "the pyramids of Egypt", "the Great Wall of China",
    "ancient Rome", "ancient Greece", "the Renaissance", "the printing press", "the industrial revolution",
    "democracy", "money", "banks", "saving money", "budgeting", "taxes", "inflation", "the stock market",
    "small businesses", "job interviews", "writing a resume", "time management", "productivity",
    "learning a language", "reading books", "libraries", "music", "the piano", "the guitar", "jazz",
    "painting", "photography", "movies", "theater", "poetry", "chess", "football", "basketball",
    "the Olympics", "running", "swimming", "yoga", "meditation", "friendship", "kindness", "teamwork",
    "leadership", "public speaking", "critical thinking", "creativity", "mathematics", "prime numbers",
    "fractions", "geometry", "statistics", "probability", "the number zero", "calendars", "clocks",
    "maps", "the compass", "weather forecasts", "clouds", "snow", "thunderstorms", "wind energy",
    "solar panels", "nuclear energy", "batteries", "plastic", "glass", "paper", "cotton", "wool",
    "bridges", "skyscrapers", "houses", "cities", "villages", "farming", "rice", "wheat", "apples",
    "bananas", "honey", "cheese", "milk", "water", "salt", "sugar", "the color blue", "mirrors",
    "light", "sound", "echoes", "telescopes", "microscopes", "the periodic table", "oxygen", "carbon",
    "iron", "gold", "diamonds", "the speed of light", "time zones", "birthdays", "holidays", "camping",
    "hiking", "mountains", "rivers", "lakes", "islands", "Paris", "Tokyo", "New York", "London",
    "Africa", "Antarctica", "the Amazon river", "Mount Everest", "the Sahara desert", "kangaroos",
    "wolves", "horses", "frogs", "spiders", "whales", "octopuses", "the alphabet", "handwriting",
    "typewriters", "radio", "television", "newspapers", "podcasts", "online learning", "homework",
    "exams", "university", "science fairs", "the scientific method", "experiments", "inventions",
    "Albert Einstein", "Marie Curie", "Isaac Newton", "Leonardo da Vinci", "Shakespeare",
    "fairy tales", "dragons", "pirates", "knights", "castles", "treasure maps", "space travel",
    "Mars", "Jupiter", "comets", "stars", "the sun", "eclipses", "tides", "seasons", "autumn leaves",
    "winter", "spring", "summer vacation", "the beach", "sandcastles", "kites", "board games",
    "puzzles", "riddles", "magic tricks", "origami", "knitting", "pottery", "woodworking",
    "first aid", "fire safety", "road safety", "drinking enough water", "stress", "happiness",
    "gratitude", "habits", "goals", "motivation", "procrastination", "good manners", "recycled art",
    "volunteering", "pets", "aquariums", "zoos", "national parks", "bird watching", "the night sky",
]

_HELDOUT_EVERY = 8  # every 8th subject is held out


def _subjects(heldout: bool) -> list[str]:
    return [s for i, s in enumerate(SUBJECTS) if (i % _HELDOUT_EVERY == 0) == heldout]


def train_prompts(seed: int = 0) -> list[str]:
    """Every train template x every train subject, shuffled with ``seed`` (5,688), then every session-13
    template (``TEMPLATES_TRAIN_2``) x every train subject, shuffled apart (3,792; 9,480 in all)."""
    prompts = [t.format(s=s) for s in _subjects(False) for t in TEMPLATES_TRAIN]
    random.Random(seed).shuffle(prompts)
    more = [t.format(s=s) for s in _subjects(False) for t in TEMPLATES_TRAIN_2]
    random.Random(seed + 13).shuffle(more)
    return prompts + more


def heldout_prompts(n: int = 40, seed: int = 1) -> list[str]:
    """``n`` prompts from held-out templates x held-out subjects (seeded sample)."""
    prompts = [t.format(s=s) for s in _subjects(True) for t in TEMPLATES_HELDOUT]
    random.Random(seed).shuffle(prompts)
    return prompts[:n]


if __name__ == "__main__":
    print(len(train_prompts()), "train prompts;", len(_subjects(True)) * len(TEMPLATES_HELDOUT), "held-out")
    print(train_prompts()[:5], heldout_prompts(5))
