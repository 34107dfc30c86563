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

# A second block of train templates (none a paraphrase of a held-out one). Their prompts come after the first
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
    """Every train template x every train subject, shuffled with ``seed`` (5,688), then every template
    of the second block (``TEMPLATES_TRAIN_2``) x every train subject, shuffled apart (3,792; 9,480 in all), then
    ``third_block`` (shuffled apart again)."""
    prompts = [t.format(s=s) for s in _subjects(False) for t in TEMPLATES_TRAIN]
    random.Random(seed).shuffle(prompts)
    more = [t.format(s=s) for s in _subjects(False) for t in TEMPLATES_TRAIN_2]
    random.Random(seed + 13).shuffle(more)
    return prompts + more + third_block(seed)

# A third block, different in kind (not only "{s}" templates): coding, arithmetic and word problems,
# rewriting / summarising a given sentence, classification, advice, comparisons, multi-sentence instructions,
# role-play, short factual questions, plus 22 more templates over new train-only subjects (SUBJECTS_3; SUBJECTS
# is untouched, so the held-out split is the same). No prompt names a held-out subject (filtered) and no
# template paraphrases a held-out one. These prompts come after the first 9,480 in ``train_prompts()``, shuffled
# apart (seed + 16), so every earlier index stays valid.
TEMPLATES_TRAIN_3 = [
    "Write a short persuasive paragraph in favour of {s}.",
    "Pretend you are a tour guide and introduce {s} to a group of visitors.",
    "Write one multiple-choice question about {s} and give the correct answer.",
    "What would change if {s} disappeared tomorrow?",
    "Describe a typical day of someone whose job involves {s}.",
    "Is {s} overrated? Give a balanced answer.",
    "Make a small markdown table with two columns about {s}: a feature and why it matters.",
    "Explain {s} as if you were a pirate.",
    "Give a one-sentence definition of {s}, then one example.",
    "What are some myths about {s}, and what is the truth?",
    "Write a short motivational message inspired by {s}.",
    "How does {s} show up in everyday life?",
    "Create a simple 30-minute lesson plan about {s}.",
    "Write a job advertisement for a position connected to {s}.",
    "Write a short review of an imaginary book about {s}.",
    "What ethical questions does {s} raise?",
    "Write a short FAQ about {s} with three questions and their answers.",
    "Describe {s} using only very simple words.",
    "Write the opening paragraph of a mystery novel in which {s} plays a role.",
    "Give me an outline for a five-minute presentation on {s}.",
    "What numbers or statistics are interesting about {s}?",
    "Write a short conversation between a student and a teacher about {s}.",
]

SUBJECTS_3 = [
    "quantum computing", "the stock exchange", "renewable energy", "electric scooters", "vertical farming",
    "the Roman Empire", "the Silk Road", "the Vikings", "the French Revolution", "the Moon landing",
    "the Amazon rainforest", "the Arctic", "the Pacific Ocean", "the Alps", "the Nile",
    "cryptocurrency", "credit cards", "mortgages", "retirement savings", "insurance",
    "open source software", "cloud computing", "web browsers", "spreadsheets", "version control",
    "JavaScript", "Linux", "keyboards", "video calls", "online shopping",
    "marathons", "tennis", "cycling races", "rock climbing", "skiing", "surfing", "martial arts",
    "baking cookies", "making soup", "fermentation", "vegetarian cooking", "breakfast", "street food",
    "tomatoes", "potatoes", "olive oil", "bread yeast", "ice cream", "lemonade",
    "volcanic islands", "caves", "waterfalls", "wetlands", "grasslands", "the tundra",
    "parrots", "crocodiles", "bats", "jellyfish", "snails", "turtles", "foxes", "bears", "eagles", "bees in winter",
    "the lungs", "bones", "muscles", "the eyes", "hearing", "teeth", "the skin", "dreams",
    "family traditions", "weddings", "neighbours", "moving house", "city parks", "public transport",
    "traffic lights", "street art", "museums", "opera", "ballet", "comic books", "cartoons", "sculpture",
    "architecture", "interior design", "fashion", "sewing", "candles", "clocks in towers",
    "lighthouses", "submarines", "hot air balloons", "helicopters", "ships", "canals", "tunnels",
    "the Industrial Age", "electric guitars", "drums", "choirs", "folk songs", "lullabies",
    "climate models", "recycling plastic bottles", "air pollution", "noise pollution", "clean water",
    "vaccinated pets", "dog training", "horse riding", "beekeeping", "chickens", "sheep farming",
    "writing essays", "note taking", "memory", "curiosity", "patience", "honesty", "empathy", "courage",
    "negotiation", "customer service", "remote work", "startups", "marketing", "advertising", "branding",
    "logic puzzles", "crosswords", "sudoku", "card games", "dice", "lotteries",
    "algebra", "triangles", "percentages", "decimals", "square roots", "graphs", "averages",
]

_CODE_TASKS = [
    "reverse a string", "check whether a number is prime", "count the vowels in a string",
    "find the largest number in a list", "compute the factorial of a number", "print the FizzBuzz sequence up to 30",
    "merge two sorted lists", "remove duplicates from a list", "check whether a word is a palindrome",
    "sum the digits of an integer", "convert Celsius to Fahrenheit", "count how often each word appears in a text",
    "compute the nth Fibonacci number", "find the second smallest element of a list",
    "capitalize every word in a sentence",
    "check whether two strings are anagrams", "compute the average of a list of numbers", "flatten a nested list",
    "read a text file and count its lines", "generate a random password of 12 characters",
    "sort a list of names alphabetically", "find the greatest common divisor of two numbers",
    "check whether a year is a leap year", "convert a binary string to a decimal number",
    "remove all whitespace from a string", "rotate a list by k positions", "find all even numbers in a list",
    "compute the length of the longest word in a sentence", "validate a simple email address",
    "transpose a matrix",
]
_CODE_LANGS = ["Python", "JavaScript", "Java", "C", "Go", "Rust"]
_CODE_TEMPLATES = [
    "Write a {lang} function to {task}.",
    "How do I {task} in {lang}? Show a short example.",
    "Write a {lang} program that can {task}, with comments.",
]
_CODE_SNIPPETS = [
    "def f(xs):\n    return [x * x for x in xs if x % 2 == 0]",
    "for i in range(1, 6):\n    print('*' * i)",
    "def g(s):\n    return s[::-1] == s",
    "total = 0\nfor n in range(10):\n    total += n\nprint(total)",
    "words = text.split()\nprint(len(set(words)))",
    "def h(n):\n    if n < 2:\n        return n\n    return h(n - 1) + h(n - 2)",
    "d = {}\nfor c in 'banana':\n    d[c] = d.get(c, 0) + 1\nprint(d)",
    "nums = [3, 1, 2]\nnums.sort(reverse=True)\nprint(nums[0])",
    "const add = (a, b) => a + b;\nconsole.log(add(2, 3));",
    "SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY COUNT(*) DESC;",
    "with open('data.txt') as fh:\n    lines = [l.strip() for l in fh if l.strip()]",
    "def avg(xs):\n    return sum(xs) / len(xs)",
]
_CODE_SNIPPET_TEMPLATES = [
    "Explain what this code does:\n```\n{code}\n```",
    "Is there a bug or an edge case in this code? Explain.\n```\n{code}\n```",
    "Rewrite this code to be easier to read:\n```\n{code}\n```",
]

_SENTENCES = [
    "The meeting has been moved to Thursday because the manager is travelling.",
    "i dont think we should of went to the party last night",
    "Our company is pleased to announce the opening of a new office in the city centre.",
    "The cat sat on the warm windowsill and watched the birds in the garden.",
    "Due to unforeseen circumstances, the concert will not take place as planned.",
    "She finished the marathon in under four hours despite the heavy rain.",
    "The new phone has a bigger screen, a faster processor and a longer battery life.",
    "Please remember to turn off the lights when you leave the room.",
    "The results of the experiment were surprising and need further study.",
    "He was very tired after working late every night for a week.",
    "The library will be closed on Monday for maintenance work.",
    "Eating more vegetables and sleeping well can improve your mood.",
    "The train was delayed by forty minutes, so we missed the start of the film.",
    "Our team won the match after scoring two goals in the last ten minutes.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Many people enjoy walking in the park on sunny weekend mornings.",
    "The software update fixes several bugs and improves performance.",
    "me and him was going to the store when it started raining",
    "The museum's new exhibition shows paintings from the nineteenth century.",
    "Learning to play an instrument takes patience and regular practice.",
    "The price of fresh fruit has gone up a lot this year.",
    "The children built a large snowman in front of the school.",
    "Customers can return any item within thirty days of purchase.",
    "The old bridge was replaced by a modern steel structure in 2010.",
]
_SENTENCE_TEMPLATES = [
    "Rewrite this sentence to sound more formal: \"{x}\"",
    "Make this sentence simpler and shorter: \"{x}\"",
    "Translate this sentence into French: \"{x}\"",
    "Correct any grammar mistakes in this sentence: \"{x}\"",
    "Summarize this sentence in five words or fewer: \"{x}\"",
    "Turn this sentence into a question: \"{x}\"",
    "Rewrite this sentence in the past tense: \"{x}\"",
    "Write three different ways to say this: \"{x}\"",
    "What is the main point of this sentence? \"{x}\"",
]

_REVIEWS = [
    "The food was cold and the waiter ignored us for half an hour.",
    "Absolutely loved this book, I read it in one sitting!",
    "The hotel room was clean but the walls were thin and it was noisy.",
    "This vacuum cleaner broke after two weeks. Waste of money.",
    "Great value for the price, and delivery was fast.",
    "The movie started slowly but the ending was fantastic.",
    "Customer support solved my problem in five minutes. Impressive.",
    "The shoes look nice but they hurt my feet after an hour.",
    "I am not sure how I feel about this album; some songs are good, others are boring.",
    "Terrible app. It crashes every time I open it.",
    "The tour guide was friendly and knew a lot about the city.",
    "The coffee was fine, nothing special.",
]
_STATEMENTS = [
    "Water boils at 100 degrees Celsius at sea level.", "Spiders are insects.", "The Pacific is the largest ocean.",
    "Humans have four lungs.", "Bats are mammals.", "Paris is the capital of Italy.", "A week has seven days.",
    "Lightning never strikes the same place twice.", "Penguins live at the North Pole.",
    "The heart pumps blood through the body.", "Glass is made mainly from sand.", "Tomatoes are a fruit.",
    "Sound travels faster than light.", "A triangle has three sides.", "Gold is a good conductor of electricity.",
    "Goldfish have a memory of only three seconds.",
]
_CLASSIFY = [
    "Classify these animals as mammals, birds, fish or reptiles: cow, eagle, salmon, lizard, bat, penguin.",
    "Which of these are fruits and which are vegetables: carrot, apple, spinach, mango, onion, banana?",
    "Sort these words into nouns, verbs and adjectives: run, happy, table, quickly, blue, jump, city.",
    "Group these countries by continent: Brazil, Japan, Kenya, Canada, Germany, India, Chile, Egypt.",
    "Which of these are renewable energy sources: coal, wind, solar, oil, hydro, natural gas?",
    "Label each of these as a solid, liquid or gas at room temperature: ice, steam, iron, milk, oxygen, sand.",
    "Sort these numbers into odd and even: 12, 7, 33, 40, 18, 21, 5.",
    "Which of these are programming languages: Python, Excel, Rust, HTML, Java, Photoshop?",
    "Classify these sentences as questions, commands or statements: Close the door. Is it raining? The sky is grey.",
    "Put these planets in order from the Sun: Mars, Venus, Jupiter, Mercury, Earth.",
]
_ADVICE = [
    "I have an exam in three days and I have not started studying.", "my neighbour plays loud music every night",
    "I want to get fit but I only have twenty minutes a day", "I keep forgetting people's names",
    "my houseplants keep dying", "I spend too much money on takeaway food", "I feel nervous before presentations",
    "my friend forgot my birthday and I feel hurt", "I cannot decide between two job offers",
    "I want to learn to cook but I do not know where to start", "my laptop is very slow",
    "I have trouble waking up in the morning", "I want to read more books this year",
    "my team at work does not communicate well", "I am moving to a new city where I know nobody",
    "my dog pulls on the leash during walks", "I want to save for a holiday next summer",
    "I have too many emails in my inbox", "my child does not want to do homework",
    "I get distracted by my phone while working",
]
_ADVICE_TEMPLATES = ["{x}. What should I do?", "Can you help me? {x}.", "Give me a plan in a few steps: {x}."]
_PAIRS = [
    ("a laptop", "a desktop computer"), ("tea bags", "loose leaf tea"), ("renting", "buying a home"),
    ("running", "cycling"), ("e-books", "paper books"), ("a crocodile", "an alligator"), ("weather", "climate"),
    ("a virus", "bacteria"), ("speed", "velocity"), ("a lake", "a pond"), ("baking soda", "baking powder"),
    ("HTML", "CSS"), ("a list", "a tuple in Python"), ("RAM", "storage"), ("a frog", "a toad"),
    ("a simile", "a metaphor"), ("credit", "debit"), ("mean", "median"), ("a moth", "a butterfly"),
    ("a hurricane", "a tornado"), ("a bakery", "a patisserie"), ("a violin", "a viola"), ("jam", "jelly"),
    ("an email", "a letter"), ("a city", "a town"), ("a hobby", "a job"), ("a wolf", "a husky"),
]
_PAIR_TEMPLATES = [
    "What is the difference between {a} and {b}?",
    "Which would you choose, {a} or {b}, and why?",
    "List two similarities and two differences between {a} and {b}.",
]
_TASKS = [
    "I am planning a picnic for six people. Make a shopping list and a short schedule for the day.",
    "Write an email to my landlord about a broken heater. Keep it polite and under 100 words.",
    "Plan a three-day trip to a seaside town. Include one activity for each morning and afternoon.",
    "Write a weekly cleaning schedule for a small flat shared by two people.",
    "Create a simple workout for beginners. It should take 15 minutes and need no equipment.",
    "Draft a short thank-you note to a teacher. Mention one lesson that helped.",
    "Make a to-do list for preparing a birthday party. Order it by what to do first.",
    "Write a short agenda for a one-hour team meeting about a new project.",
    "Suggest a menu for a vegetarian dinner with a starter, a main course and a dessert.",
    "Write a short apology message for arriving late to a meeting. Keep it professional.",
    "Give me a morning routine that takes 30 minutes. Include time for breakfast.",
    "Write instructions for making a cup of tea, in numbered steps.",
    "Describe how to change a flat bicycle tyre, step by step.",
    "Write a packing list for a weekend camping trip in spring.",
    "Write a short announcement for a school bake sale on Friday. Include the time and place.",
    "Plan a study timetable for learning Spanish over four weeks.",
    "Write a product return request for a pair of headphones that stopped working.",
    "Give me a budget for a month for a student with 800 dollars. Use categories.",
    "Write a short welcome message for new members of a book club.",
    "Explain how to make a paper aeroplane, step by step.",
]
_ROLES = [
    ("a friendly librarian", "Recommend three books to someone who liked adventure stories."),
    ("a chef", "Tell me how to make a quick lunch from rice, eggs and vegetables."),
    ("a fitness coach", "Motivate me to go for a run this evening."),
    ("a history teacher", "Tell me a short story about life in a medieval village."),
    ("a travel agent", "Suggest a holiday for someone who loves mountains and quiet places."),
    ("a detective", "Describe the first clue you find at a crime scene."),
    ("a robot from the future", "Describe what cities look like in your time."),
    ("a gardener", "Tell me what to plant in a small balcony garden."),
    ("a shopkeeper", "Welcome me to your shop and describe what you sell."),
    ("a space station astronaut", "Describe your morning routine in orbit."),
    ("a museum guide", "Describe the most famous painting in your museum."),
    ("a customer service agent", "Help me with a late delivery of my order."),
    ("a wise old owl", "Give me advice about making friends."),
    ("a news presenter", "Read a short weather report for the weekend."),
    ("a medieval knight", "Describe your armour and your horse."),
    ("a tech support worker", "Help me connect my printer to Wi-Fi."),
]
_FACTS = [
    "What is the capital of Canada?", "How many legs does a spider have?", "Who wrote Romeo and Juliet?",
    "What is the boiling point of water in Fahrenheit?", "How many continents are there?",
    "What gas do plants absorb from the air?", "What is the largest planet in the solar system?",
    "How many minutes are in a day?", "What language is spoken in Brazil?", "What is the chemical symbol for gold?",
    "Who painted the Mona Lisa?", "How many players are on a football team?", "What is the freezing point of water?",
    "What is the tallest animal in the world?", "Which organ pumps blood through the body?",
    "What is the longest river in Africa?", "How many sides does a hexagon have?", "What is the currency of Japan?",
    "What do bees make?", "Which planet is known as the Red Planet?", "How many bones are in the human body?",
    "What is the smallest prime number?", "What is the opposite of 'ancient'?", "What is H2O?",
    "Which animal is known as the king of the jungle?", "How many hours are in a week?",
    "What is the main ingredient of guacamole?", "What year did the Second World War end?",
    "What is the square root of 81?", "Which instrument has 88 keys?", "What is the capital of Australia?",
    "What is the hardest natural material?", "How many strings does a standard guitar have?",
    "What is the largest mammal?", "In which country are the pyramids of Giza?",
]


def _block3_standalone(rng: random.Random) -> list[str]:
    out = [t.format(lang=lang, task=task) for task in _CODE_TASKS for lang in _CODE_LANGS for t in _CODE_TEMPLATES
           if rng.random() < 0.5]  # about half of the 540 (task, language, template) triples
    out += [t.format(code=c) for c in _CODE_SNIPPETS for t in _CODE_SNIPPET_TEMPLATES]
    out += [t.format(x=x) for x in _SENTENCES for t in _SENTENCE_TEMPLATES]
    out += [f"Is this review positive, negative or mixed? \"{r}\"" for r in _REVIEWS]
    out += [f"What is the sentiment of this review, and why? \"{r}\"" for r in _REVIEWS]
    out += [f"True or false: {s} Explain briefly." for s in _STATEMENTS]
    out += _CLASSIFY
    out += [t.format(x=x[0].upper() + x[1:]) for x in _ADVICE for t in _ADVICE_TEMPLATES]
    out += [t.format(a=a, b=b) for a, b in _PAIRS for t in _PAIR_TEMPLATES]
    out += _TASKS
    out += [f"You are {role}. {req}" for role, req in _ROLES]
    out += [f"Pretend to be {role}. {req}" for role, req in _ROLES]
    out += _FACTS
    out += [f"{q} Answer in one sentence." for q in _FACTS]
    items = ["apples", "pencils", "stickers", "books", "marbles", "cupcakes", "tickets", "coins"]
    names = ["Anna", "Ben", "Carlos", "Dina", "Emil", "Fatima", "Grace", "Hugo"]
    for k in range(160):  # arithmetic and word problems, seeded numbers
        a, b, c = rng.randint(2, 99), rng.randint(2, 30), rng.randint(2, 12)
        name, item = rng.choice(names), rng.choice(items)
        out.append([
            f"{name} has {a} {item} and buys {b} more. Then {name} gives away {c}. How many {item} are left?",
            f"What is {a} times {b}? Show your working.",
            f"Solve for x: {c}x + {b} = {c * a + b}. Explain each step.",
            f"What is {5 * c}% of {a * 10}?",
            f"A train travels at {a + 20} km per hour for {c} hours. How far does it go?",
            f"{name} shares {b * c} {item} equally among {c} friends. How many does each friend get?",
            f"Convert {a} kilometres to miles and explain the calculation.",
            f"A shirt costs {a + 10} dollars and is on sale for {5 * (c % 8 + 1)}% off. What is the sale price?",
            f"What is the average of {a}, {b}, {c} and {a + b}?",
            f"Is {a * b + 1} a prime number? Explain how you checked.",
            f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
            f"If a recipe for {c} people needs {b * 10} grams of flour, how much is needed for {c + 3} people?",
        ][k % 12])
    return out


def third_block(seed: int = 0) -> list[str]:
    """The third block of train prompts: ``TEMPLATES_TRAIN_3`` x ``SUBJECTS_3`` and the standalone kinds, each shuffled
    (seeded), then alternated; none names a held-out subject."""
    import re

    held = re.compile("|".join(rf"\b{re.escape(s)}\b" for s in _subjects(True)), re.IGNORECASE)
    seen: set[str] = set()
    keep = lambda ps: [p for p in ps if not held.search(p) and not (p in seen or seen.add(p))]  # noqa: E731
    templ = keep([t.format(s=s) for s in SUBJECTS_3 for t in TEMPLATES_TRAIN_3])
    alone = keep(_block3_standalone(random.Random(seed + 160)))
    random.Random(seed + 16).shuffle(templ)
    random.Random(seed + 17).shuffle(alone)
    # alternate the two kinds while both last, so that any prefix (answers made so far) is about half standalone
    out = [p for pair in zip(alone, templ) for p in pair]
    n = min(len(alone), len(templ))
    return out + alone[n:] + templ[n:]


def heldout_prompts(n: int = 40, seed: int = 1) -> list[str]:
    """``n`` prompts from held-out templates x held-out subjects (seeded sample)."""
    prompts = [t.format(s=s) for s in _subjects(True) for t in TEMPLATES_HELDOUT]
    random.Random(seed).shuffle(prompts)
    return prompts[:n]


if __name__ == "__main__":
    print(len(train_prompts()), "train prompts;", len(_subjects(True)) * len(TEMPLATES_HELDOUT), "held-out")
    print(train_prompts()[:5], heldout_prompts(5))
